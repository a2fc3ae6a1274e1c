//! The guard's and the load-time layout policy's old path, kept only so
//! that `tests/`, `benches/` and `cli/bench.rs` compile unchanged until they
//! name `crate::guard` and `crate::model::streaming`; nothing else in the
//! crate uses it. Delete it with their last use: it is the one place where
//! `core` names a layer above it.

#[doc(hidden)]
pub use crate::guard::{
    build_tier, check, cpu_vendor, early, guard, host_features, missing_features, required_features,
};
#[doc(hidden)]
pub use crate::model::streaming::{pack_override, streaming, Streaming};
