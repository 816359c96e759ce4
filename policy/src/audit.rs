//! The audit record (DESIGN.md §5) and its hash chain.
