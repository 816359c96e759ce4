//! Strict JSON for inspected bodies (classifier helper fills this in).
