//! How a node joins and behaves ([`NodeOptions`], checked before it joins), and why it could
//! not ([`JoinError`]).

use super::auth::Key;
use super::subjects::is_token;
use std::fmt;
use std::time::Duration;

/// How a node joins and behaves. Build it with [`NodeOptions::new`] and the `with_` methods.
#[derive(Clone, Debug)]
pub struct NodeOptions {
    pub(crate) name: String,
    pub(crate) nats: nats::Options,
    pub(crate) prefix: String,
    pub(crate) heartbeat_interval: Duration,
    pub(crate) heartbeat_misses: u32,
    pub(crate) ask_timeout: Duration,
    pub(crate) max_in_flight: usize,
    pub(crate) max_clock_skew: Duration,
    pub(crate) secret: Option<Key>,
    secret_len: usize,
    pub(crate) max_peers: usize,
    pub(crate) max_names: usize,
    pub(crate) max_peer_silence: Duration,
}

/// Why a node could not join.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum JoinError {
    /// The node name or a subject prefix that cannot be used, and what is allowed.
    Invalid(String),
    /// A node of that name is in the cluster already.
    NameTaken(String),
    /// NATS refused or could not be reached.
    Nats(nats::Error),
    /// The node's own beats on `subject` did not come back through the NATS server within
    /// its silence: the account may not publish or subscribe there, or the server is held up.
    Unheard {
        /// The subject the beats went to.
        subject: String,
    },
}

impl fmt::Display for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JoinError::Invalid(why) => write!(f, "cannot join: {why}"),
            JoinError::NameTaken(name) => write!(
                f,
                "cannot join: a node named `{name}` is in the cluster already; node names are \
                 unique"
            ),
            JoinError::Nats(error) => write!(f, "cannot join: {error}"),
            JoinError::Unheard { subject } => write!(
                f,
                "cannot join: the node's own beats on `{subject}` did not come back through \
                 the NATS server within its heartbeat silence; the account must be allowed to \
                 publish and subscribe there"
            ),
        }
    }
}

impl std::error::Error for JoinError {}

impl From<nats::Error> for JoinError {
    fn from(error: nats::Error) -> Self {
        JoinError::Nats(error)
    }
}

impl NodeOptions {
    /// Options for the node `name` (letters, digits, `_` and `-`), connecting to the NATS
    /// servers of `servers` (`nats://[user:password@]host:port`, see [`nats::Options::new`]).
    pub fn new<I, S>(servers: I, name: &str) -> Result<Self, JoinError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        if !is_token(name) || name.len() > 64 {
            return Err(JoinError::Invalid(format!(
                "`{name}` is not a valid node name: use 1 to 64 letters, digits, `_` and `-`"
            )));
        }
        let nats = nats::Options::new(servers)?.with_name(format!("actors node {name}"));
        Ok(Self {
            name: name.to_string(),
            nats,
            prefix: "actors".into(),
            heartbeat_interval: Duration::from_millis(500),
            heartbeat_misses: 3,
            ask_timeout: Duration::from_secs(5),
            max_in_flight: 4096,
            max_clock_skew: Duration::ZERO,
            secret: None,
            secret_len: 0,
            max_peers: 1024,
            max_names: 65_536,
            max_peer_silence: Duration::from_secs(30),
        })
    }

    /// How far apart the nodes' wall clocks may be (default 0: one machine, or clocks kept
    /// in step well below the asks' deadlines). An ask's deadline travels as a wall-clock
    /// time, and a serving node starts it only while its own clock, plus this bound, is
    /// before the deadline: so an ask never starts after its asker gave up, as long as the
    /// clocks differ by no more than this. Asks whose whole deadline is shorter than the
    /// bound never start. Must be below the heartbeat silence.
    pub fn with_max_clock_skew(mut self, skew: Duration) -> Self {
        self.max_clock_skew = skew;
        self
    }

    /// Authenticates membership (heartbeats, departures, ended exposures) with a secret every
    /// node of the cluster shares, at least 16 bytes: each announcement carries an
    /// HMAC-SHA-256 tag over its subject and bytes, a sequence number and a send time, and
    /// nodes take only announcements that verify, in order, and younger than
    /// `max_peer_silence`. Without it, membership trusts whoever may publish on
    /// `<prefix>.announce.<node>`: restrict that with NATS permissions per node (see the
    /// crate's remote documentation), or expect a client on the same subjects to be able to
    /// forge a node's departure.
    pub fn with_secret(mut self, secret: impl AsRef<[u8]>) -> Self {
        self.secret = Some(Key::new(secret.as_ref()));
        self.secret_len = secret.as_ref().len();
        self
    }

    /// Bounds what peers may make this node keep: at most `max_peers` peers up (default
    /// 1024), `max_names` names exposed over all of them (default 65,536), and a silence of
    /// at most `max_silence` before a peer counts as down, whatever it announces (default
    /// 30 s). What does not fit is refused and counted (`Node::dropped`).
    pub fn with_peer_limits(
        mut self,
        max_peers: usize,
        max_names: usize,
        max_silence: Duration,
    ) -> Self {
        self.max_peers = max_peers;
        self.max_names = max_names;
        self.max_peer_silence = max_silence;
        self
    }

    /// This node's silence: how long its peers wait for a heartbeat before it counts as
    /// down (its interval times its misses, plus half an interval).
    pub(crate) fn silence(&self) -> Duration {
        self.heartbeat_interval * self.heartbeat_misses + self.heartbeat_interval / 2
    }

    /// Changes the NATS options (credentials, reconnects, limits).
    pub fn with_nats(mut self, change: impl FnOnce(nats::Options) -> nats::Options) -> Self {
        self.nats = change(self.nats);
        self
    }

    /// How often the node heartbeats (default 500 ms), and how many heartbeats in a row a
    /// peer may miss before it is down (default 3).
    pub fn with_heartbeat(mut self, interval: Duration, misses: u32) -> Self {
        self.heartbeat_interval = interval;
        self.heartbeat_misses = misses;
        self
    }

    /// The deadline of asks that set none (default 5 s).
    pub fn with_ask_timeout(mut self, timeout: Duration) -> Self {
        self.ask_timeout = timeout;
        self
    }

    /// The subject prefix (default `actors`; one token): clusters with different prefixes
    /// share a NATS server without seeing each other.
    pub fn with_subject_prefix(mut self, prefix: &str) -> Self {
        self.prefix = prefix.to_string();
        self
    }

    /// The asks an exposed actor may have in flight (default 4096): beyond, new ones are
    /// answered [`Error::Full`](crate::Error::Full).
    pub fn with_max_in_flight(mut self, asks: usize) -> Self {
        self.max_in_flight = asks;
        self
    }

    pub(crate) fn validate(&self) -> Result<(), JoinError> {
        // One token: with dots, one cluster's prefix could be another's actor subject.
        if !is_token(&self.prefix) {
            return Err(JoinError::Invalid(format!(
                "`{}` is not a valid subject prefix: use one token of letters, digits, `_` \
                 and `-`",
                self.prefix
            )));
        }
        if self.heartbeat_interval < Duration::from_millis(10) || self.heartbeat_misses < 2 {
            return Err(JoinError::Invalid(
                "the heartbeat interval must be at least 10 ms and misses at least 2 (a node \
                 must hear its own beat come back within its silence)"
                    .into(),
            ));
        }
        if self.ask_timeout.is_zero() || self.max_in_flight == 0 {
            return Err(JoinError::Invalid(
                "the ask timeout and max_in_flight must be above zero".into(),
            ));
        }
        let silence = self.silence();
        if self.max_clock_skew >= silence {
            return Err(JoinError::Invalid(format!(
                "the clock skew bound of {:?} must be below the heartbeat silence of {silence:?}",
                self.max_clock_skew
            )));
        }
        if self.max_peers == 0 || self.max_names == 0 || self.max_peer_silence < silence {
            return Err(JoinError::Invalid(format!(
                "the peer limits must allow at least one peer and one name, and a silence of at \
                 least this node's own ({silence:?})"
            )));
        }
        if self.secret.is_some() && self.secret_len < 16 {
            return Err(JoinError::Invalid(
                "the membership secret must be at least 16 bytes".into(),
            ));
        }
        Ok(())
    }
}
