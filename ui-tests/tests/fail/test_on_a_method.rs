struct Suite;

impl Suite {
    #[runtime::test]
    async fn checks_something(&self) {}
}

fn main() {}
