//! Queue conformance (to be written).
