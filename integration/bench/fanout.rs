//! Fan-out benchmark (being written).
fn main() {}
