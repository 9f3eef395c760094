//! Host name resolution: numeric addresses are parsed here; names go to the system resolver
//! (`getaddrinfo`, through std) on a blocking thread of the runner, so no pool worker waits on
//! DNS.
//!
//! A context whose runner has ended resolves nothing, not even a numeric address: resolution
//! belongs to a live runtime, like every other capability.

use crate::context::Context;
use crate::{Error, Resolver, Spawner};
use std::future::Future;
use std::net::{IpAddr, ToSocketAddrs};

/// What `host` is, before any lookup.
fn classify(host: &str) -> Result<Option<IpAddr>, Error> {
    if host.is_empty() {
        return Err(Error::ResolveFailed("the host name is empty".into()));
    }
    if host.contains('\0') {
        return Err(Error::ResolveFailed(format!(
            "the host name {host:?} contains a NUL byte; allowed is a DNS name or an IP address"
        )));
    }
    let bare = host
        .strip_prefix('[')
        .and_then(|host| host.strip_suffix(']'))
        .unwrap_or(host);
    Ok(bare.parse::<IpAddr>().ok())
}

fn lookup(host: &str) -> Result<Vec<IpAddr>, Error> {
    let addresses = (host, 0)
        .to_socket_addrs()
        .map_err(|error| Error::ResolveFailed(format!("{host}: {error}")))?;
    let mut ips: Vec<IpAddr> = Vec::new();
    for address in addresses {
        if !ips.contains(&address.ip()) {
            ips.push(address.ip());
        }
    }
    if ips.is_empty() {
        return Err(Error::ResolveFailed(format!("{host}: no addresses")));
    }
    Ok(ips)
}

impl Resolver for Context {
    fn resolve(&self, host: &str) -> impl Future<Output = Result<Vec<IpAddr>, Error>> + Send {
        let host = host.to_owned();
        let context = self.clone();
        async move {
            if context.runtime().tasks.is_closed() {
                return Err(Error::ResolveFailed(format!(
                    "cannot resolve {host:?}: the runtime has shut down"
                )));
            }
            if let Some(ip) = classify(&host)? {
                return Ok(vec![ip]);
            }
            let name = host.clone();
            let looked_up = context
                .shared(true)
                .spawn(move |_| async move { lookup(&name) })
                .await;
            match looked_up {
                Ok(result) => result,
                Err(error) => Err(Error::ResolveFailed(format!(
                    "cannot resolve {host:?}: the lookup ended early: {error}"
                ))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_hosts_need_no_lookup_and_bad_input_is_named() {
        assert_eq!(classify("10.0.0.1"), Ok(Some("10.0.0.1".parse().unwrap())));
        assert_eq!(classify("[::1]"), Ok(Some("::1".parse().unwrap())));
        assert_eq!(classify("localhost"), Ok(None));
        let Err(Error::ResolveFailed(why)) = classify("a\0b") else {
            panic!("a NUL byte is refused");
        };
        assert!(why.contains("NUL"), "{why}");
        assert!(matches!(classify(""), Err(Error::ResolveFailed(_))));
    }
}
