//! The name a client certificate logs in as with SASL EXTERNAL: its subject's common name, or
//! its whole subject as an RFC 4514 string (RabbitMQ's `ssl_cert_login_from`).

use std::fmt::Write;

use x509_parser::prelude::{FromDer, X509Certificate};
use x509_parser::x509::AttributeTypeAndValue;

/// Why a peer certificate gave no subject.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CertificateError {
    /// Not a DER X.509 certificate.
    #[error("the peer certificate could not be parsed: {0}")]
    Unparsable(String),
}

/// A verified client certificate's subject, as SASL EXTERNAL reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertificateSubject {
    common_name: Option<String>,
    distinguished_name: String,
}

impl CertificateSubject {
    /// A subject from its parts (tests and callers that parsed the certificate themselves).
    #[must_use]
    pub fn new(common_name: Option<String>, distinguished_name: String) -> Self {
        Self { common_name, distinguished_name }
    }

    /// The subject of a DER-encoded certificate (the leaf the TLS handshake verified).
    ///
    /// # Errors
    /// When `der` is not an X.509 certificate.
    pub fn from_der(der: &[u8]) -> Result<Self, CertificateError> {
        let (_, certificate) =
            X509Certificate::from_der(der).map_err(|e| CertificateError::Unparsable(e.to_string()))?;
        let subject = certificate.subject();
        // The last CN when there are several, as RabbitMQ's `rabbit_ssl:peer_cert_auth_name`.
        let common_name = subject.iter_common_name().filter_map(|cn| cn.as_str().ok()).last().map(str::to_owned);
        // RFC 4514: the most specific RDN first, RDNs separated by ",", the values of a
        // multi-valued RDN by "+".
        let rdns: Vec<String> =
            subject.iter_rdn().map(|rdn| rdn.iter().map(attribute).collect::<Vec<_>>().join("+")).collect();
        let distinguished_name = rdns.into_iter().rev().collect::<Vec<_>>().join(",");
        Ok(Self { common_name, distinguished_name })
    }

    /// The subject's common name (its last CN).
    #[must_use]
    pub fn common_name(&self) -> Option<&str> {
        self.common_name.as_deref()
    }

    /// The subject as an RFC 4514 string, e.g. `CN=app,O=Example,C=DE`.
    #[must_use]
    pub fn distinguished_name(&self) -> &str {
        &self.distinguished_name
    }
}

/// One `type=value` of an RDN.
fn attribute(attribute: &AttributeTypeAndValue<'_>) -> String {
    let oid = attribute.attr_type().to_id_string();
    let name = match oid.as_str() {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "STREET",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "0.9.2342.19200300.100.1.25" => "DC",
        "0.9.2342.19200300.100.1.1" => "UID",
        _ => oid.as_str(),
    };
    let value = match attribute.as_str() {
        Ok(text) => escape(text),
        // RFC 4514 2.4: a value of another type is `#` and the hex of its BER encoding.
        Err(_) => {
            let any = attribute.attr_value();
            let data = any.data;
            let mut hex = String::from("#");
            let _ = write!(hex, "{:02x}", any.tag().0 & 0x1f);
            for byte in length_octets(data.len()).iter().chain(data) {
                let _ = write!(hex, "{byte:02x}");
            }
            hex
        }
    };
    format!("{name}={value}")
}

/// DER length octets.
fn length_octets(len: usize) -> Vec<u8> {
    if len < 0x80 {
        return vec![u8::try_from(len).unwrap_or(0)];
    }
    let bytes: Vec<u8> = len.to_be_bytes().into_iter().skip_while(|b| *b == 0).collect();
    let mut out = vec![0x80 | u8::try_from(bytes.len()).unwrap_or(0)];
    out.extend(bytes);
    out
}

/// RFC 4514 2.4 escaping of a string value.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let last = text.chars().count().saturating_sub(1);
    for (i, c) in text.chars().enumerate() {
        match c {
            '"' | '+' | ',' | ';' | '<' | '>' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '#' if i == 0 => out.push_str("\\#"),
            ' ' if i == 0 || i == last => out.push_str("\\ "),
            '\0' => out.push_str("\\00"),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn certificate(names: &[(rcgen::DnType, &str)]) -> Vec<u8> {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        let mut dn = rcgen::DistinguishedName::new();
        for (kind, value) in names {
            dn.push(kind.clone(), *value);
        }
        params.distinguished_name = dn;
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().der().to_vec()
    }

    #[test]
    fn the_common_name_and_the_rfc4514_subject() {
        let der = certificate(&[
            (rcgen::DnType::CountryName, "DE"),
            (rcgen::DnType::OrganizationName, "Example, Inc"),
            (rcgen::DnType::CommonName, "app-1"),
        ]);
        let subject = CertificateSubject::from_der(&der).unwrap();
        assert_eq!(subject.common_name(), Some("app-1"));
        assert_eq!(subject.distinguished_name(), "CN=app-1,O=Example\\, Inc,C=DE");
    }

    #[test]
    fn no_common_name() {
        let der = certificate(&[(rcgen::DnType::OrganizationName, "Org")]);
        let subject = CertificateSubject::from_der(&der).unwrap();
        assert_eq!(subject.common_name(), None);
        assert_eq!(subject.distinguished_name(), "O=Org");
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(matches!(CertificateSubject::from_der(b"not a certificate"), Err(CertificateError::Unparsable(_))));
    }

    #[test]
    fn escaping_follows_rfc4514() {
        assert_eq!(escape("#a b "), "\\#a b\\ ");
        assert_eq!(escape("a+b;c<d>\"\\"), "a\\+b\\;c\\<d\\>\\\"\\\\");
        assert_eq!(length_octets(5), [5]);
        assert_eq!(length_octets(300), [0x82, 1, 44]);
    }
}
