//! The client's error type, and turning the error codes of broker answers into it.

use shale_proto::v1::ErrorResult;
use shale_records::ErrorCode;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot reach a broker at {address}: {}", root_cause(.source))]
    Connect {
        address: String,
        source: tonic::transport::Error,
    },
    /// A gRPC failure: its code and message (tonic's own Display adds the details and
    /// metadata, which read as a dump).
    #[error("request failed ({:?}): {}", .0.code(), .0.message())]
    Rpc(#[from] tonic::Status),
    #[error("{code}: {message}")]
    Broker {
        code: &'static str,
        code_value: i32,
        message: String,
    },
    #[error("cannot decode a record batch: {0}")]
    Decode(#[from] shale_records::batch::BatchError),
    #[error("{0}")]
    Invalid(String),
    #[error("timed out: {0}")]
    Timeout(String),
    /// One failure reported to several waiters (every record of a failed batch).
    #[error(transparent)]
    Shared(std::sync::Arc<Error>),
}

impl Error {
    pub(crate) fn from_code(code: i32, message: String) -> Option<Self> {
        if code == ErrorCode::None as i32 {
            return None;
        }
        let name = ErrorCode::try_from(code).map_or("UNKNOWN_ERROR_CODE", |c| c.as_str_name());
        let message = if message.is_empty() {
            name.to_lowercase().replace('_', " ")
        } else {
            message
        };
        Some(Error::Broker {
            code: name,
            code_value: code,
            message,
        })
    }

    /// The Kafka error code the broker answered, if any.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::Broker { code_value, .. } => ErrorCode::try_from(*code_value).ok(),
            Error::Shared(e) => e.code(),
            _ => None,
        }
    }

    /// Whether the broker said leadership is elsewhere or in flux (refresh and retry).
    pub fn is_leadership(&self) -> bool {
        self.code().is_some_and(ErrorCode::is_leadership)
    }

    /// Whether the same request may succeed later (leadership moving, a broker down,
    /// replication catching up): the broker's verdict by [`ErrorCode::is_retriable`],
    /// which the broker uses too, or a transport failure.
    pub fn is_retriable(&self) -> bool {
        use tonic::Code;
        match self {
            Error::Shared(e) => e.is_retriable(),
            Error::Connect { .. } => true,
            Error::Rpc(s) => matches!(
                s.code(),
                Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown
            ),
            Error::Broker { .. } => self.code().is_some_and(ErrorCode::is_retriable),
            _ => false,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The innermost error's text (transport errors nest the same words several deep).
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

pub(crate) fn check(code: i32, message: &str) -> Result<()> {
    Error::from_code(code, message.to_string()).map_or(Ok(()), Err)
}

pub(crate) fn check_result(r: Option<ErrorResult>) -> Result<()> {
    r.map_or(Ok(()), |e| check(e.error_code, &e.error_message))
}

pub(crate) fn broker_error(code: ErrorCode, message: String) -> Error {
    Error::from_code(code as i32, message).unwrap_or_else(|| Error::Invalid("no error".into()))
}
