//! Salted password hashes, as RabbitMQ stores them, so that definitions exported from RabbitMQ
//! import with working passwords and ours export to RabbitMQ.
//!
//! RabbitMQ's `rabbit_password` hashes a password as `salt ++ H(salt ++ password)` with a
//! random 4-byte salt, and the management API and definitions carry that as base64
//! (`password_hash`) with the module as `hashing_algorithm`.

use base64::Engine;
use sha2::{Digest, Sha256, Sha512};

use super::error::AccessError;

/// RabbitMQ's salt length.
const SALT_LEN: usize = 4;

/// A hashing algorithm RabbitMQ knows, by its module name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HashingAlgorithm {
    /// `rabbit_password_hashing_sha256`: RabbitMQ's default since 3.6.
    Sha256,
    /// `rabbit_password_hashing_sha512`.
    Sha512,
}

impl HashingAlgorithm {
    /// RabbitMQ's module name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sha256 => "rabbit_password_hashing_sha256",
            Self::Sha512 => "rabbit_password_hashing_sha512",
        }
    }

    /// The algorithm named by RabbitMQ's module name.
    ///
    /// # Errors
    /// An algorithm Charon does not implement (MD5, RabbitMQ's pre-3.6 default, included: it
    /// is broken, and importing it would keep it).
    pub fn parse(name: &str) -> Result<Self, AccessError> {
        match name {
            "rabbit_password_hashing_sha256" => Ok(Self::Sha256),
            "rabbit_password_hashing_sha512" => Ok(Self::Sha512),
            other => Err(AccessError::BadRequest(format!("unsupported hashing algorithm: {other}"))),
        }
    }

    fn digest(self, salt: &[u8], password: &[u8]) -> Vec<u8> {
        match self {
            Self::Sha256 => Sha256::new().chain_update(salt).chain_update(password).finalize().to_vec(),
            Self::Sha512 => Sha512::new().chain_update(salt).chain_update(password).finalize().to_vec(),
        }
    }

    fn digest_len(self) -> usize {
        match self {
            Self::Sha256 => 32,
            Self::Sha512 => 64,
        }
    }
}

/// A salted password hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PasswordHash {
    algorithm: HashingAlgorithm,
    /// Salt followed by the digest.
    salted: Vec<u8>,
}

impl PasswordHash {
    /// Hashes `password` with a fresh random salt and SHA-256, as RabbitMQ does by default.
    #[must_use]
    pub fn new(password: &str) -> Self {
        Self::with_salt(HashingAlgorithm::Sha256, rand::random::<[u8; SALT_LEN]>(), password)
    }

    fn with_salt(algorithm: HashingAlgorithm, salt: [u8; SALT_LEN], password: &str) -> Self {
        let mut salted = salt.to_vec();
        salted.extend(algorithm.digest(&salt, password.as_bytes()));
        Self { algorithm, salted }
    }

    /// A stored hash: salt and digest.
    ///
    /// # Errors
    /// When the length does not fit the algorithm.
    pub fn from_parts(algorithm: HashingAlgorithm, salted: Vec<u8>) -> Result<Self, AccessError> {
        if salted.len() != SALT_LEN + algorithm.digest_len() {
            return Err(AccessError::BadRequest(format!(
                "password_hash has {} bytes, {} needs {}",
                salted.len(),
                algorithm.as_str(),
                SALT_LEN + algorithm.digest_len()
            )));
        }
        Ok(Self { algorithm, salted })
    }

    /// A hash as the management API and definitions carry it (base64).
    ///
    /// # Errors
    /// Bad base64 or a length that does not fit the algorithm.
    pub fn from_base64(algorithm: HashingAlgorithm, encoded: &str) -> Result<Self, AccessError> {
        let salted = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .map_err(|_| AccessError::BadRequest("password_hash is not base64".into()))?;
        Self::from_parts(algorithm, salted)
    }

    /// The algorithm.
    #[must_use]
    pub fn algorithm(&self) -> HashingAlgorithm {
        self.algorithm
    }

    /// Salt and digest.
    #[must_use]
    pub fn salted(&self) -> &[u8] {
        &self.salted
    }

    /// Salt and digest in base64, as the management API shows `password_hash`.
    #[must_use]
    pub fn to_base64(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.salted)
    }

    /// Whether `password` is this one; compares in constant time, so the time a wrong
    /// password takes tells nothing about how much of it was right.
    #[must_use]
    pub fn verify(&self, password: &str) -> bool {
        let (salt, digest) = self.salted.split_at(SALT_LEN.min(self.salted.len()));
        let candidate = self.algorithm.digest(salt, password.as_bytes());
        candidate.len() == digest.len() && candidate.iter().zip(digest).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// RabbitMQ's own documentation example: `rabbitmqctl hash_password` output for "test12"
    /// with salt 0x908DC60A; checked independently with
    /// `(echo -n 908DC60A | xxd -r -p; echo -n test12) | sha256sum`.
    #[test]
    fn rabbitmq_hashes_verify() {
        let hash = PasswordHash::with_salt(HashingAlgorithm::Sha256, [0x90, 0x8d, 0xc6, 0x0a], "test12");
        assert_eq!(hash.to_base64(), "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR");
        let imported = PasswordHash::from_base64(HashingAlgorithm::Sha256, &hash.to_base64()).unwrap();
        assert!(imported.verify("test12"));
        assert!(!imported.verify("test13"));
        assert!(!imported.verify(""));
    }

    #[test]
    fn fresh_hashes_are_salted_and_verify() {
        let (a, b) = (PasswordHash::new("secret"), PasswordHash::new("secret"));
        assert_ne!(a.salted(), b.salted(), "random salt");
        assert!(a.verify("secret") && b.verify("secret"));
        assert_eq!(a.salted().len(), 36);
        let long = PasswordHash::with_salt(HashingAlgorithm::Sha512, [1, 2, 3, 4], "x");
        assert_eq!(long.salted().len(), 68);
        assert!(long.verify("x"));
    }

    #[test]
    fn malformed_imports_are_refused() {
        assert!(PasswordHash::from_base64(HashingAlgorithm::Sha256, "not base64!").is_err());
        assert!(
            PasswordHash::from_base64(HashingAlgorithm::Sha512, "kI3GCqW5JLMJa4iX1lo7X4D6XbYqlLgxIs30+P6tENUV2POR")
                .is_err()
        );
        assert!(HashingAlgorithm::parse("rabbit_password_hashing_md5").is_err());
        assert_eq!(HashingAlgorithm::parse("rabbit_password_hashing_sha512").unwrap(), HashingAlgorithm::Sha512);
    }
}
