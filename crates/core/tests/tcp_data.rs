mod common;
use common::*;

#[test]
fn placeholder() {
    let _ = pattern(1);
}
