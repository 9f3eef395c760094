//! `#[actor(remote)]` alone and with `implements(..)`, with every handler form: sync and
//! async, with and without the context, a delegated reply, and no arguments; and
//! `#[interface(remote)]`.

use actors::prelude::*;
use actors::remote::{Node, Target};
use actors::Reply;

#[interface(remote)]
pub trait Named {
    fn name(&self) -> String;
}

#[actor(mailbox = 8)]
pub struct Store {
    values: Vec<(String, Vec<u8>)>,
}

#[actor(remote, implements(Named))]
impl Store {
    /// Stores a value.
    pub fn put(&mut self, key: String, value: Vec<u8>) -> usize {
        self.values.push((key, value));
        self.values.len()
    }

    pub async fn len(&self) -> usize {
        self.values.len()
    }

    fn clear(&mut self, ctx: &mut actors::Context<Self>) {
        let _ = ctx.id();
        self.values.clear();
    }

    fn later(&mut self, reply: Reply<Option<u64>>) {
        reply.send(None);
    }
}

#[actor]
impl Named for Store {
    fn name(&self) -> String {
        "store".into()
    }
}

#[allow(dead_code)]
async fn uses(node: Node, local: StoreRef) -> Result<(), actors::Error> {
    node.expose("store", &local).await?;
    let remote: StoreRemoteRef = node.lookup("store");
    let _: &Target = remote.target();
    let _: usize = remote.put("k".into(), vec![1]).await?;
    let _: usize = remote.len().timeout(std::time::Duration::from_secs(1)).await?;
    remote.tell_clear().await?;
    remote.try_clear()?;
    let _: Option<u64> = remote.later().await?;
    let _ = remote.monitor();
    let _: StoreRemoteRef = node.lookup_on("other", "store");
    // The interface, remote too.
    let named: NamedRef = local.into();
    node.expose("named", &named).await?;
    let remote: NamedRemoteRef = node.lookup("named");
    let _: String = remote.name().await?;
    remote.tell_name().await?;
    remote.try_name()?;
    let _ = remote.monitor();
    Ok(())
}

fn main() {}
