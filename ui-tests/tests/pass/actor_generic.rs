//! A generic actor with bounds on the struct and its impl, and two instantiations.
use actors::prelude::*;
use std::fmt::Display;

#[actor(mailbox = 4)]
pub struct Labeller<T: Display + Send + 'static> {
    prefix: String,
    last: Option<T>,
}

#[actor]
impl<T: Display + Send + 'static> Labeller<T> {
    fn label(&mut self, value: T) -> String {
        let text = format!("{}{value}", self.prefix);
        self.last = Some(value);
        text
    }

    fn swap(&mut self, value: T) -> Option<T> {
        self.last.replace(value)
    }
}

fn main() {
    runtime::Runner::new(runtime::Config::default()).start(|context| async move {
        let numbers: LabellerRef<u32> = Labeller {
            prefix: "#".into(),
            last: None,
        }
        .spawn(&context);
        let words: LabellerRef<String> = Labeller {
            prefix: "@".into(),
            last: None,
        }
        .spawn(&context);
        assert_eq!(numbers.label(7).await.unwrap(), "#7");
        assert_eq!(words.label("x".into()).await.unwrap(), "@x");
        assert_eq!(numbers.swap(8).await.unwrap(), Some(7));
    });
}
