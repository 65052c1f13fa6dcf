//! The embedded queue (to be written).
