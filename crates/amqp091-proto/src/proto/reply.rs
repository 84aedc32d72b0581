//! AMQP 0.9.1 reply codes and RabbitMQ's `NAME - explanation` reply texts.

/// Reply codes the broker sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum ReplyCode {
    /// 200.
    Success = 200,
    /// 312: unroutable mandatory message.
    NoRoute = 312,
    /// 320: the broker closed the connection (e.g. shutdown).
    ConnectionForced = 320,
    /// 403.
    AccessRefused = 403,
    /// 404.
    NotFound = 404,
    /// 405.
    ResourceLocked = 405,
    /// 406.
    PreconditionFailed = 406,
    /// 501.
    FrameError = 501,
    /// 502.
    SyntaxError = 502,
    /// 503.
    CommandInvalid = 503,
    /// 504.
    ChannelError = 504,
    /// 505.
    UnexpectedFrame = 505,
    /// 506.
    ResourceError = 506,
    /// 530.
    NotAllowed = 530,
    /// 540.
    NotImplemented = 540,
    /// 541.
    InternalError = 541,
}

impl ReplyCode {
    /// The numeric code.
    #[must_use]
    pub fn code(self) -> u16 {
        self as u16
    }

    /// RabbitMQ's name for the code, which prefixes reply texts.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Success => "OK",
            Self::NoRoute => "NO_ROUTE",
            Self::ConnectionForced => "CONNECTION_FORCED",
            Self::AccessRefused => "ACCESS_REFUSED",
            Self::NotFound => "NOT_FOUND",
            Self::ResourceLocked => "RESOURCE_LOCKED",
            Self::PreconditionFailed => "PRECONDITION_FAILED",
            Self::FrameError => "FRAME_ERROR",
            Self::SyntaxError => "SYNTAX_ERROR",
            Self::CommandInvalid => "COMMAND_INVALID",
            Self::ChannelError => "CHANNEL_ERROR",
            Self::UnexpectedFrame => "UNEXPECTED_FRAME",
            Self::ResourceError => "RESOURCE_ERROR",
            Self::NotAllowed => "NOT_ALLOWED",
            Self::NotImplemented => "NOT_IMPLEMENTED",
            Self::InternalError => "INTERNAL_ERROR",
        }
    }

    /// Whether the code closes the whole connection (a "hard" error) rather than a channel.
    #[must_use]
    pub fn is_hard(self) -> bool {
        !matches!(
            self,
            Self::Success
                | Self::NoRoute
                | Self::AccessRefused
                | Self::NotFound
                | Self::ResourceLocked
                | Self::PreconditionFailed
        )
    }
}

/// `NAME - explanation`. A text longer than the 255 bytes a short string holds is cut to 252
/// bytes and `...`, as RabbitMQ does (`rabbit_binary_generator`).
#[must_use]
pub fn reply_text(code: ReplyCode, explanation: &str) -> String {
    let mut text = format!("{} - {explanation}", code.name());
    if text.len() > 255 {
        let mut cut = 252;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("...");
    }
    text
}
