//! The compiled policy the proxy asks.
