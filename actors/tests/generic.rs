//! Generic actors: one declaration, several instantiations in one program, bounds carried
//! to the generated ref and messages.

use actors::prelude::*;
use std::collections::HashMap;
use std::hash::Hash;

#[actor(mailbox = 16)]
struct Cache<K, V>
where
    K: Eq + Hash + Send + 'static,
    V: Clone + Send + 'static,
{
    entries: HashMap<K, V>,
}

#[actor]
impl<K, V> Cache<K, V>
where
    K: Eq + Hash + Send + 'static,
    V: Clone + Send + 'static,
{
    fn put(&mut self, key: K, value: V) -> Option<V> {
        self.entries.insert(key, value)
    }

    fn get(&self, key: K) -> Option<V> {
        self.entries.get(&key).cloned()
    }

    /// Takes `Self`-typed values, resolved with the generic arguments.
    fn absorb(&mut self, others: Vec<Self>) -> usize {
        for other in others {
            self.entries.extend(other.entries);
        }
        self.entries.len()
    }

    fn snapshot(&self, ctx: &mut actors::Context<Self>) -> (usize, actors::ActorId) {
        (self.entries.len(), ctx.id())
    }
}

/// Bounds naming `Self`, a default, and an impl that names its parameter differently.
#[actor]
struct Tagged<T: Send + 'static, U: Send + 'static = ()>
where
    Self: Sized,
{
    tag: T,
    extra: Option<U>,
}

#[actor]
impl<Tag: Clone + Send + 'static> Tagged<Tag>
where
    Self: Sized,
{
    fn tag(&self) -> Tag {
        let _ = &self.extra;
        self.tag.clone()
    }

    fn on_stop(&mut self, reason: &actors::ExitReason) {
        let _ = reason;
    }
}

/// A second generic actor, over a const parameter, with a hook.
#[actor]
struct Window<const N: usize> {
    last: Vec<u64>,
}

#[actor]
impl<const N: usize> Window<N> {
    fn on_start(&mut self) {
        self.last.reserve(N);
    }

    fn push(&mut self, value: u64) -> Vec<u64> {
        self.last.push(value);
        if self.last.len() > N {
            self.last.remove(0);
        }
        self.last.clone()
    }
}

#[runtime::test(timeout = "20s")]
async fn two_instantiations_of_a_generic_actor_run_side_by_side(context: runtime::Context) {
    let names: CacheRef<String, u32> = Cache {
        entries: HashMap::new(),
    }
    .spawn(&context);
    let squares: CacheRef<u64, Vec<u64>> = Cache {
        entries: HashMap::new(),
    }
    .spawn(&context);
    assert_eq!(names.put("one".to_string(), 1).await, Ok(None));
    assert_eq!(names.put("one".to_string(), 11).await, Ok(Some(1)));
    squares.tell_put(3, vec![9]).await.unwrap();
    assert_eq!(names.get("one".to_string()).await, Ok(Some(11)));
    assert_eq!(squares.get(3).await, Ok(Some(vec![9])));
    assert_eq!(squares.get(4).await, Ok(None));
    let other = Cache {
        entries: HashMap::from([("two".to_string(), 2)]),
    };
    assert_eq!(names.absorb(vec![other]).await, Ok(2));
    let (count, id) = names.snapshot().await.unwrap();
    assert_eq!((count, id), (2, names.id()));
    assert_ne!(names.id(), squares.id());
    // Both are labelled by the declaration.
    assert!(names.id().to_string().starts_with("cache#"));
    let weak = squares.downgrade();
    assert!(weak.upgrade().is_some());

    let tagged: TaggedRef<&'static str> = Tagged {
        tag: "t",
        extra: None,
    }
    .spawn(&context);
    assert_eq!(tagged.tag().await, Ok("t"));
    assert_eq!(tagged.stop().await, actors::ExitReason::Stopped);

    let window: WindowRef<2> = Window { last: vec![] }.spawn(&context);
    window.tell_push(1).await.unwrap();
    window.tell_push(2).await.unwrap();
    assert_eq!(window.push(3).await, Ok(vec![2, 3]));
    let wide: WindowRef<4> = Window { last: vec![] }.spawn(&context);
    wide.tell_push(1).await.unwrap();
    assert_eq!(wide.push(2).await, Ok(vec![1, 2]));
}
