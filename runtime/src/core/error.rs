//! The one error type of the library. Each kind maps to a documented exit code
//! of the `ml` CLI, so scripts can tell a missing file from a corrupt one.

use std::fmt;

/// What went wrong, coarsely. The message carries the detail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The file system refused: missing file, permissions, short read.
    Io,
    /// The bytes are not a valid file of the expected format.
    Format,
    /// The dimensions are individually valid but do not fit together.
    Shape,
    /// A size is too large to allocate or to address.
    NoMem,
    /// This CPU lacks an instruction set the build needs.
    Isa,
}

impl ErrorKind {
    /// The `ml` exit code for this kind (README: 3 Io … 7 Isa).
    pub fn exit_code(self) -> i32 {
        match self {
            ErrorKind::Io => 3,
            ErrorKind::Format => 4,
            ErrorKind::Shape => 5,
            ErrorKind::NoMem => 6,
            ErrorKind::Isa => 7,
        }
    }
}

/// An error with its kind and a message naming the field and values involved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MlError {
    pub kind: ErrorKind,
    pub message: String,
}

impl MlError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        MlError {
            kind,
            message: message.into(),
        }
    }
    pub fn io(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Io, message)
    }
    pub fn format(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Format, message)
    }
    pub fn shape(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Shape, message)
    }
    pub fn no_mem(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NoMem, message)
    }
    pub fn isa(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Isa, message)
    }
}

impl fmt::Display for MlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for MlError {}

pub type Result<T> = std::result::Result<T, MlError>;
