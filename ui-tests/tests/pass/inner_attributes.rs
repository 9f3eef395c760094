//! A body may start with inner attributes; they stay inside it.

#[runtime::main]
async fn main() {
    #![allow(unused_variables)]
    let unused = 1;
}

#[runtime::test]
async fn inner_attributes_in_a_test() {
    #![allow(unused_variables)]
    let unused = 1;
}
