//! Every accepted interface form: sync and async handlers, a context, a delegated reply,
//! a default body, docs and cfgs; an interface from another module; a generic actor and a
//! dedicated one behind it; an actor implementing two; recipients of each handler shape; the
//! interfaces' handlers on the actor's own ref and pool ref, in every form.
use actors::prelude::*;
use actors::{Context, Recipient, Reply};

mod api {
    use actors::prelude::*;

    #[interface]
    pub trait Store {
        /// Reads `key`.
        fn get(&self, key: String) -> Option<String>;
        async fn put(&mut self, key: String, value: String);
        fn size(&self, ctx: &mut actors::Context<Self>) -> usize;
        fn later(&self, reply: actors::Reply<u32>);
        fn version(&self) -> u32 {
            1
        }
        /// A default async body using `self`, an argument and `Self::`.
        async fn describe(&mut self, prefix: String) -> String {
            format!("{prefix}{}", Self::version(&*self))
        }
        #[cfg(any())]
        fn gated(&self, value: Missing) -> Missing;
        #[cfg(any())]
        fn never(&self);
    }
}

#[interface]
pub trait Named {
    fn name(&self) -> String;
}

#[actor]
struct Memory<V: Clone + Send + 'static> {
    entries: Vec<(String, V)>,
    label: V,
}

#[actor(implements(api::Store, Named))]
impl<V: Clone + Send + Into<String> + From<String> + 'static> Memory<V> {
    fn label(&self) -> V {
        self.label.clone()
    }
}

#[actor]
impl<V: Clone + Send + Into<String> + From<String> + 'static> api::Store for Memory<V> {
    fn get(&self, key: String) -> Option<String> {
        self.entries
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.clone().into())
    }

    async fn put(&mut self, key: String, value: String) {
        self.entries.push((key, V::from(value)));
    }

    fn size(&self, _ctx: &mut Context<Self>) -> usize {
        self.entries.len()
    }

    fn later(&self, reply: Reply<u32>) {
        reply.send(7);
    }
}

#[actor]
impl<V: Clone + Send + Into<String> + From<String> + 'static> Named for Memory<V> {
    fn name(&self) -> String {
        self.label.clone().into()
    }
}

#[actor(dedicated)]
struct Fixed;

#[actor(implements(api::Store))]
impl Fixed {}

#[actor]
impl api::Store for Fixed {
    fn get(&self, _key: String) -> Option<String> {
        None
    }

    async fn put(&mut self, _key: String, _value: String) {}

    fn size(&self, _ctx: &mut Context<Self>) -> usize {
        0
    }

    fn later(&self, reply: Reply<u32>) {
        reply.send(0);
    }

    fn version(&self) -> u32 {
        2
    }
}

fn main() {
    runtime::Runner::new(runtime::Config::default()).start(|context| async move {
        let memory: MemoryRef<String> = Memory {
            entries: Vec::new(),
            label: "mem".to_string(),
        }
        .spawn(&context);
        let stores: Vec<api::StoreRef> = vec![memory.clone().into(), Fixed.spawn(&context).into()];
        stores[0].put("a".into(), "1".into()).await.unwrap();
        assert_eq!(stores[0].get("a".into()).await, Ok(Some("1".to_string())));
        assert_eq!(stores[0].size().await, Ok(1));
        assert_eq!(stores[1].size().await, Ok(0));
        assert_eq!(stores[0].later().await, Ok(7));
        assert_eq!(stores[0].version().await, Ok(1));
        assert_eq!(stores[1].version().await, Ok(2));
        assert_eq!(stores[1].describe("v".into()).await, Ok("v2".to_string()));
        let named: NamedRef = memory.clone().into();
        assert_eq!(named.name().await, Ok("mem".to_string()));
        assert_eq!(memory.label().await, Ok("mem".to_string()));
        let label: Recipient<(), String> = memory.label_recipient();
        assert_eq!(label.ask(()).await, Ok("mem".to_string()));

        // The interfaces' handlers on the actor's own ref: every form, the actor ref's ask.
        let get: actors::Ask<'_, Memory<String>, Option<String>> = memory.get("a".into());
        assert_eq!(get.await, Ok(Some("1".to_string())));
        memory.tell_put("b".into(), "2".into()).await.unwrap();
        memory.try_put("c".into(), "3".into()).unwrap();
        assert_eq!(
            memory
                .size()
                .timeout(std::time::Duration::from_secs(60))
                .queued()
                .await
                .unwrap()
                .await,
            Ok(3)
        );
        assert_eq!(memory.later().await, Ok(7));
        assert_eq!(memory.name().await, Ok("mem".to_string()));
        let get: Recipient<String, Option<String>> = memory.get_recipient();
        assert_eq!(get.ask("b".into()).await, Ok(Some("2".to_string())));
        let fixed = Fixed.spawn(&context);
        assert_eq!(fixed.version().await, Ok(2));
        assert_eq!(fixed.get("a".into()).await, Ok(None));

        // And on a pool ref, routed to a member.
        let pool: FixedPoolRef = actors::Pool::new("fixed", 2, || Fixed)
            .spawn(&context)
            .await
            .unwrap()
            .into();
        assert_eq!(pool.size().await, Ok(0));
        pool.tell_put("a".into(), "1".into()).await.unwrap();
        pool.try_put("a".into(), "1".into()).unwrap();
        assert_eq!(pool.later().await, Ok(0));
        let _: actors::Ask<'_, Fixed, u32> = pool.version();
    });
}
