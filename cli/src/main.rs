//! The `fenzi` command line.
fn main() {}
