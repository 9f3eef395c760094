//! The README's "Interfaces, recipients, registry, topics, pools" block.
use actors::prelude::*;
use actors::{Pool, Recipient, Registry, Routing, Topic, WhenFull};

#[interface]
pub trait Greeter {
    fn greet(&self, name: String) -> String;
}

#[actor]
struct English;

#[actor(implements(Greeter))]
impl English {
    fn line(&mut self, text: String) {
        let _ = text;
    }
}

#[actor]
impl Greeter for English {
    fn greet(&self, name: String) -> String {
        format!("hello {name}")
    }
}

async fn tour(context: runtime::Context) -> Result<(), actors::Error> {
    let greeter: GreeterRef = English.spawn(&context).into();
    assert_eq!(greeter.greet("Ann".into()).await?, "hello Ann");

    let english = English.spawn(&context);
    let on_line: Recipient<String, ()> = english.line_recipient();

    let registry = Registry::of(&context);
    registry.register("greeter", &greeter)?;
    let found: Option<GreeterRef> = registry.lookup("greeter");
    assert!(found.is_some());

    let room = Topic::new(&context, "room", WhenFull::Unsubscribe);
    room.subscribe(on_line);
    assert_eq!(room.publish("hi".to_string()).await.delivered, 1);

    let pool: EnglishPoolRef = Pool::new("greeters", 8, || English)
        .routing(Routing::LeastLoaded)
        .spawn(&context)
        .await?
        .into();
    pool.tell_line("to one member".into()).await?;
    pool.as_pool().resize(4).await?;
    assert_eq!(pool.as_pool().size(), 4);
    Ok(())
}

fn main() {
    runtime::Runner::new(runtime::Config::default()).start(|context| async move {
        tour(context).await.unwrap();
    });
}
