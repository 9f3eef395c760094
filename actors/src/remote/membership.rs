//! The peer table: which nodes are up, what each exposes, and the rules by which what a
//! message claims about a node changes the table. No I/O and no waiters: `heartbeat.rs` feeds
//! it the announcements it received, and `waiting.rs` resolves the asks and monitors that the
//! returned [`Change`]s concern. (Past 600 lines with its tests, which exercise every rule
//! below against the table alone; the table itself is under 400.)
//!
//! Invariants (the local configuration bounds everything a peer announces):
//! - A peer is up from its first admitted heartbeat until it has not beaten for its silence,
//!   leaves, or is replaced by a newer incarnation; then it is down, and its incarnation is
//!   remembered (`down`), so nothing of it or an older one is admitted again.
//! - A peer's silence is what it announces (its interval times its misses, plus half an
//!   interval), at least this node's own and never above `Limits::max_silence`: a peer that
//!   announces more is refused (a cap would judge it down before it judges itself cut off).
//!   Without authentication, a live incarnation's interval and silence are those of its
//!   first admitted heartbeat (a forger cannot shorten them).
//! - At most `max_peers` peers are up, and `down` remembers at most `max_peers` nodes (the
//!   longest known down forgotten first); at most `max_names` exposed names are listed over
//!   all peers, each a valid name; what does not fit is refused and counted.
//! - A newer incarnation of a peer that is up replaces it at once only when membership is
//!   authenticated (a shared secret: only a node of the cluster can sign one). Without it, it
//!   replaces the peer only once the known incarnation has been quiet for its whole silence:
//!   a forged claim never takes a node down sooner than its silence would (a node made late
//!   by a flood it is processing, or a listener late in its own batch, is not quiet yet), and
//!   a restarted node is taken for its new incarnation once the old one's silence passed.
//! - With authentication, a peer's announcements are admitted only in increasing sequence
//!   and while younger than `max_silence` (plus the skew bound) by this node's clock, so a
//!   recorded announcement cannot be replayed. Without it, sequence numbers are ignored: a
//!   forger could otherwise send a huge one and silence the real node.

use super::subjects::check_name;
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// What the local configuration allows peers.
#[derive(Clone, Debug)]
pub(crate) struct Limits {
    pub(crate) max_peers: usize,
    pub(crate) max_names: usize,
    pub(crate) max_silence: Duration,
    /// This node's own silence: the least a peer gets.
    pub(crate) silence: Duration,
    pub(crate) authenticated: bool,
    pub(crate) skew: Duration,
}

/// What a node knows of a peer.
pub(crate) struct Peer {
    pub(crate) incarnation: u64,
    seq: u64,
    /// The sequence number of its last beat (beats are counted apart from announcements).
    beat_seq: u64,
    last_seen: Instant,
    interval: Duration,
    /// Down once unheard for this long.
    pub(crate) silence: Duration,
    pub(crate) exposed: HashSet<String>,
}

/// Who sent an announcement, and when, as it claims.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Sender {
    pub(crate) node: String,
    pub(crate) incarnation: u64,
    pub(crate) seq: u64,
    pub(crate) sent_millis: u64,
}

impl Sender {
    /// Who sent `announcement`, as it claims.
    pub(crate) fn of(announcement: &super::codec::Announcement) -> Sender {
        Sender {
            node: announcement.node.clone(),
            incarnation: announcement.incarnation,
            seq: announcement.seq,
            sent_millis: announcement.sent_millis,
        }
    }
}

/// What an admitted announcement changed, for the waiters on it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Change {
    /// `node` is down; it exposed these names.
    Down {
        node: String,
        incarnation: u64,
        exposed: HashSet<String>,
    },
    /// `node` (still up) no longer exposes these names.
    Withdrawn { node: String, names: Vec<String> },
}

/// Why an announcement (or part of one) was not admitted, as the metric's reason label.
pub(crate) type Refused = &'static str;

/// An admitted heartbeat: what it changed, and why some of its names were left out.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Heard {
    pub(crate) changes: Vec<Change>,
    pub(crate) trimmed: Option<Refused>,
}

pub(crate) struct Peers {
    limits: Limits,
    me: String,
    peers: HashMap<String, Peer>,
    /// The newest incarnation known down, per node, and since when.
    down: HashMap<String, (u64, Instant)>,
    /// Names listed over all peers.
    names: usize,
}

impl Peers {
    pub(crate) fn new(me: &str, limits: Limits) -> Peers {
        Peers {
            limits,
            me: me.to_string(),
            peers: HashMap::new(),
            down: HashMap::new(),
            names: 0,
        }
    }

    pub(crate) fn get(&self, node: &str) -> Option<&Peer> {
        self.peers.get(node)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&String, &Peer)> {
        self.peers.iter()
    }

    pub(crate) fn contains(&self, node: &str) -> bool {
        self.peers.contains_key(node)
    }

    /// Whether `node` was up and is down now (not merely never heard of).
    pub(crate) fn known_down(&self, node: &str) -> bool {
        !self.peers.contains_key(node) && self.down.contains_key(node)
    }

    /// Whether a peer that is up exposes `name`.
    pub(crate) fn expose(&self, name: &str) -> bool {
        self.peers.values().any(|peer| peer.exposed.contains(name))
    }

    /// The longest silence of a peer that is up.
    pub(crate) fn longest_silence(&self) -> Option<Duration> {
        self.peers.values().map(|peer| peer.silence).max()
    }

    /// Checks what every announcement claims of its sender before its body is looked at:
    /// not this node, not an incarnation known down, not a replay (when authenticated).
    fn admit(&self, sender: &Sender, now_millis: u64) -> Result<(), Refused> {
        if sender.node == self.me {
            return Err("own");
        }
        if self
            .down
            .get(&sender.node)
            .is_some_and(|(incarnation, _)| sender.incarnation <= *incarnation)
        {
            return Err("stale");
        }
        if self.limits.authenticated {
            let oldest = (self.limits.max_silence + self.limits.skew).as_millis() as u64;
            if sender.sent_millis.saturating_add(oldest) < now_millis {
                return Err("replayed");
            }
            if let Some(peer) = self.peers.get(&sender.node)
                && peer.incarnation == sender.incarnation
                && sender.seq <= peer.seq
            {
                return Err("replayed");
            }
        }
        Ok(())
    }

    /// A heartbeat: `sender` is up with this interval, misses and names.
    pub(crate) fn heartbeat(
        &mut self,
        sender: &Sender,
        interval: Duration,
        misses: u32,
        exposed: Vec<String>,
        now: Instant,
        now_millis: u64,
    ) -> Result<Heard, Refused> {
        self.admit(sender, now_millis)?;
        let interval = interval.max(Duration::from_millis(1));
        let announced = interval.saturating_mul(misses.max(1)) + interval / 2;
        if announced > self.limits.max_silence {
            return Err("silence_above_limit");
        }
        let mut changes = Vec::new();
        if let Some(peer) = self.peers.get(&sender.node) {
            if sender.incarnation < peer.incarnation {
                return Err("stale");
            }
            if sender.incarnation > peer.incarnation {
                // A restart, or a forger's claim of one: without authentication, only once
                // the known incarnation has been silent for as long as would take it down.
                let quiet = now.saturating_duration_since(peer.last_seen) > peer.silence;
                if !self.limits.authenticated && !quiet {
                    return Err("conflict");
                }
                changes.extend(self.down(&sender.node, now));
            }
        } else if self.peers.len() >= self.limits.max_peers {
            return Err("peer_table_full");
        }
        let silence = announced.max(self.limits.silence);
        // Without authentication, a live incarnation keeps the settings it was first heard
        // with: a forged copy cannot shorten its silence.
        let (interval, silence) = match self.peers.get(&sender.node) {
            Some(peer) if !self.limits.authenticated && peer.incarnation == sender.incarnation => {
                (peer.interval, peer.silence)
            }
            _ => (interval, silence),
        };
        // Only valid names, and only as many as the table has room for: names it listed
        // before keep their place, new ones take what room is left. A name left out for room
        // is not withdrawn (the peer still exposes it; this node cannot list it).
        let mut trimmed = None;
        let mut announced = HashSet::new();
        for name in exposed {
            if check_name(&name, "actor").is_ok() {
                announced.insert(name);
            } else {
                trimmed = Some("invalid_name");
            }
        }
        let before = self
            .peers
            .get_mut(&sender.node)
            .map(|peer| std::mem::take(&mut peer.exposed))
            .unwrap_or_default();
        let room = self.limits.max_names - (self.names - before.len());
        let mut listed: HashSet<String> = before
            .iter()
            .filter(|name| announced.contains(*name))
            .cloned()
            .collect();
        for name in announced.iter() {
            if listed.contains(name) {
                continue;
            }
            if listed.len() >= room {
                trimmed = Some("names_full");
                break;
            }
            listed.insert(name.clone());
        }
        self.names = self.names - before.len() + listed.len();
        let withdrawn: Vec<String> = before
            .into_iter()
            .filter(|name| !announced.contains(name))
            .collect();
        let peer = self
            .peers
            .entry(sender.node.clone())
            .or_insert_with(|| Peer {
                incarnation: sender.incarnation,
                seq: 0,
                beat_seq: 0,
                last_seen: now,
                interval,
                silence,
                exposed: HashSet::new(),
            });
        // Alive it is from its beats only (a node that cannot beat is cut off for itself,
        // so down for its peers too), but from its first heartbeat when it is new.
        peer.seq = sender.seq;
        peer.interval = interval;
        peer.silence = silence;
        peer.exposed = listed;
        if !withdrawn.is_empty() {
            changes.push(Change::Withdrawn {
                node: sender.node.clone(),
                names: withdrawn,
            });
        }
        Ok(Heard { changes, trimmed })
    }

    /// A beat of `sender`: a peer up in that incarnation is alive now. A beat never adds a
    /// peer or changes its names (heartbeats on the announcement subject do).
    pub(crate) fn beat(
        &mut self,
        sender: &Sender,
        now: Instant,
        now_millis: u64,
    ) -> Result<(), Refused> {
        if sender.node == self.me {
            return Err("own");
        }
        let authenticated = self.limits.authenticated;
        let oldest = (self.limits.max_silence + self.limits.skew).as_millis() as u64;
        match self.peers.get_mut(&sender.node) {
            Some(peer) if peer.incarnation == sender.incarnation => {
                if authenticated
                    && (sender.seq <= peer.beat_seq
                        || sender.sent_millis.saturating_add(oldest) < now_millis)
                {
                    return Err("replayed");
                }
                peer.beat_seq = sender.seq;
                peer.last_seen = peer.last_seen.max(now);
                Ok(())
            }
            // Of another incarnation, or of a node not (yet) up: its heartbeat decides.
            _ => Err("unknown"),
        }
    }

    /// `sender` leaves: it is down.
    pub(crate) fn leaving(
        &mut self,
        sender: &Sender,
        now: Instant,
        now_millis: u64,
    ) -> Result<Option<Change>, Refused> {
        self.admit(sender, now_millis)?;
        match self.peers.get(&sender.node) {
            Some(peer) if peer.incarnation == sender.incarnation => {
                Ok(self.down(&sender.node, now))
            }
            _ => Err("unknown"),
        }
    }

    /// `sender`'s actor exposed as `name` ended: it no longer exposes it. True if `sender`
    /// is a peer that is up (or unknown, so its waiters learn of the end either way).
    pub(crate) fn exited(
        &mut self,
        sender: &Sender,
        name: &str,
        now_millis: u64,
    ) -> Result<(), Refused> {
        self.admit(sender, now_millis)?;
        match self.peers.get_mut(&sender.node) {
            Some(peer) if peer.incarnation != sender.incarnation => Err("stale"),
            Some(peer) => {
                peer.seq = peer.seq.max(sender.seq);
                if peer.exposed.remove(name) {
                    self.names -= 1;
                }
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Peers unheard for longer than their silence at `now` are down.
    pub(crate) fn silent(&mut self, now: Instant) -> Vec<Change> {
        let silent: Vec<String> = self
            .peers
            .iter()
            .filter(|(_, peer)| now.saturating_duration_since(peer.last_seen) > peer.silence)
            .map(|(node, _)| node.clone())
            .collect();
        silent
            .into_iter()
            .filter_map(|node| self.down(&node, now))
            .collect()
    }

    /// This node could not listen until `now` (it was paused or cut off): peers are not
    /// judged by a silence it may have caused, and get a whole silence from now.
    pub(crate) fn heard_all(&mut self, now: Instant) {
        for peer in self.peers.values_mut() {
            peer.last_seen = peer.last_seen.max(now);
        }
    }

    /// Takes `node` down, remembering its incarnation.
    fn down(&mut self, node: &str, now: Instant) -> Option<Change> {
        let peer = self.peers.remove(node)?;
        self.names -= peer.exposed.len();
        if !self.down.contains_key(node) && self.down.len() >= self.limits.max_peers {
            let oldest = self
                .down
                .iter()
                .min_by_key(|(_, (_, since))| *since)
                .map(|(node, _)| node.clone());
            if let Some(oldest) = oldest {
                self.down.remove(&oldest);
            }
        }
        let known = self.down.entry(node.to_string()).or_insert((0, now));
        *known = (known.0.max(peer.incarnation), now);
        Some(Change::Down {
            node: node.to_string(),
            incarnation: peer.incarnation,
            exposed: peer.exposed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(authenticated: bool) -> Limits {
        Limits {
            max_peers: 4,
            max_names: 10,
            max_silence: Duration::from_secs(10),
            silence: Duration::from_millis(350),
            authenticated,
            skew: Duration::ZERO,
        }
    }

    fn sender(node: &str, incarnation: u64, seq: u64) -> Sender {
        Sender {
            node: node.into(),
            incarnation,
            seq,
            sent_millis: 1_000_000,
        }
    }

    const NOW_MILLIS: u64 = 1_000_000;
    const SECOND: Duration = Duration::from_secs(1);

    fn beat(
        peers: &mut Peers,
        from: &Sender,
        at: Instant,
        names: &[&str],
    ) -> Result<Vec<Change>, Refused> {
        heard(peers, from, at, names).map(|heard| heard.changes)
    }

    fn heard(
        peers: &mut Peers,
        from: &Sender,
        at: Instant,
        names: &[&str],
    ) -> Result<Heard, Refused> {
        let names = names.iter().map(|name| name.to_string()).collect();
        peers.heartbeat(from, SECOND / 2, 3, names, at, NOW_MILLIS)
    }

    #[test]
    fn a_peer_is_up_from_its_heartbeat_until_its_silence_passes() {
        let mut peers = Peers::new("me", limits(false));
        let start = Instant::now();
        assert_eq!(
            beat(&mut peers, &sender("a", 1, 1), start, &["x"]),
            Ok(vec![])
        );
        assert!(peers.contains("a") && peers.expose("x"));
        assert_eq!(peers.get("a").unwrap().silence, SECOND * 3 / 2 + SECOND / 4);
        assert_eq!(peers.silent(start + SECOND), vec![]);
        let changes = peers.silent(start + SECOND * 2);
        assert!(matches!(&changes[..], [Change::Down { node, .. }] if node == "a"));
        assert!(peers.known_down("a") && !peers.expose("x"));
        // Its own late heartbeat does not bring it back: a new incarnation does.
        assert_eq!(
            beat(&mut peers, &sender("a", 1, 2), start + SECOND * 2, &[]),
            Err("stale")
        );
        assert_eq!(
            beat(&mut peers, &sender("a", 2, 1), start + SECOND * 2, &[]),
            Ok(vec![])
        );
        assert!(!peers.known_down("a"));
        assert_eq!(
            beat(&mut peers, &sender("me", 9, 1), start, &[]),
            Err("own")
        );
    }

    #[test]
    fn a_peer_announcing_a_silence_above_the_local_cap_is_refused_and_one_below_raised() {
        let mut peers = Peers::new("me", limits(false));
        let now = Instant::now();
        let forged = peers.heartbeat(
            &sender("a", 1, 1),
            Duration::from_millis(u32::MAX.into()),
            u32::MAX,
            vec![],
            now,
            NOW_MILLIS,
        );
        assert_eq!(forged, Err("silence_above_limit"));
        assert!(!peers.contains("a"));
        let quick = peers.heartbeat(
            &sender("b", 1, 1),
            Duration::from_millis(1),
            1,
            vec![],
            now,
            NOW_MILLIS,
        );
        assert_eq!(quick, Ok(Heard::default()));
        assert_eq!(peers.get("b").unwrap().silence, Duration::from_millis(350));
    }

    #[test]
    fn without_authentication_a_forged_copy_cannot_shorten_a_live_peers_silence() {
        let mut peers = Peers::new("me", limits(false));
        let start = Instant::now();
        beat(&mut peers, &sender("a", 5, 1), start, &[]).unwrap();
        let silence = peers.get("a").unwrap().silence;
        // The same incarnation, claiming a 1 ms interval.
        let short = Duration::from_millis(1);
        peers
            .heartbeat(&sender("a", 5, 2), short, 1, vec![], start, NOW_MILLIS)
            .unwrap();
        assert_eq!(peers.get("a").unwrap().silence, silence);
        // So a forged restart 10 ms later is still a conflict.
        let soon = start + Duration::from_millis(10);
        assert_eq!(
            beat(&mut peers, &sender("a", 6, 1), soon, &[]),
            Err("conflict")
        );
    }

    #[test]
    fn the_table_holds_at_most_its_peers_and_names_and_only_valid_names() {
        let mut peers = Peers::new("me", limits(false));
        let now = Instant::now();
        for node in ["a", "b", "c", "d"] {
            assert_eq!(beat(&mut peers, &sender(node, 1, 1), now, &[]), Ok(vec![]));
        }
        assert_eq!(
            beat(&mut peers, &sender("e", 1, 1), now, &[]),
            Err("peer_table_full")
        );
        let many: Vec<String> = (0..100).map(|n| format!("n{n}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let first = heard(&mut peers, &sender("a", 1, 2), now, &many).unwrap();
        assert_eq!(first.trimmed, Some("names_full"));
        assert_eq!(peers.get("a").unwrap().exposed.len(), 10);
        let full = heard(&mut peers, &sender("b", 1, 2), now, &["more"]).unwrap();
        assert_eq!(full.trimmed, Some("names_full"));
        assert!(peers.get("b").unwrap().exposed.is_empty());
        // Announcing them all again trims nothing it listed, and withdraws nothing.
        let again = heard(&mut peers, &sender("a", 1, 3), now, &many).unwrap();
        assert_eq!(again.changes, vec![]);
        let kept = peers.get("a").unwrap().exposed.clone();
        let reversed: Vec<&str> = many.iter().rev().copied().collect();
        heard(&mut peers, &sender("a", 1, 4), now, &reversed).unwrap();
        assert_eq!(
            peers.get("a").unwrap().exposed,
            kept,
            "listed names keep their place"
        );
        let invalid = heard(&mut peers, &sender("a", 1, 5), now, &["bad name", "ok"]).unwrap();
        assert_eq!(invalid.trimmed, Some("invalid_name"));
        assert!(
            matches!(&invalid.changes[..], [Change::Withdrawn { names, .. }] if names.len() == 10)
        );
        assert_eq!(
            peers.get("a").unwrap().exposed,
            HashSet::from(["ok".to_string()])
        );
        // Room for names again: b may list one now.
        let room = heard(&mut peers, &sender("b", 1, 3), now, &["more"]).unwrap();
        assert_eq!(room.trimmed, None);
        // Down peers are forgotten, their names with them, and the table has room again.
        let later = now + SECOND * 60;
        assert_eq!(peers.silent(later).len(), 4);
        assert_eq!(
            beat(&mut peers, &sender("e", 1, 1), later, &["x"]),
            Ok(vec![])
        );
        assert_eq!(peers.names, 1);
    }

    #[test]
    fn without_authentication_a_newer_incarnation_replaces_only_a_quiet_peer() {
        let mut peers = Peers::new("me", limits(false));
        let start = Instant::now();
        beat(&mut peers, &sender("a", 5, 1), start, &["x"]).unwrap();
        // A forged restart while the real one heartbeats: refused.
        let soon = start + SECOND / 2;
        assert_eq!(
            beat(&mut peers, &sender("a", 6, 1), soon, &[]),
            Err("conflict")
        );
        beat(&mut peers, &sender("a", 5, 2), soon, &["x"]).unwrap();
        assert_eq!(peers.get("a").unwrap().incarnation, 5);
        // Its sequence numbers are not trusted: a forged huge one silences nothing.
        beat(&mut peers, &sender("a", 5, u64::MAX), soon, &["x"]).unwrap();
        beat(&mut peers, &sender("a", 5, 3), soon, &["x"]).unwrap();
        // Late by two of its intervals (a node busy with a flood, or a listener late in its
        // batch): still refused, since it is not silent for its whole silence (1.75 s).
        assert_eq!(
            beat(&mut peers, &sender("a", 6, 1), soon + SECOND, &[]),
            Err("conflict")
        );
        assert_eq!(peers.get("a").unwrap().incarnation, 5);
        // Once the old incarnation has been silent for its silence, the new one replaces it.
        let quiet = soon + SECOND * 2;
        let changes = beat(&mut peers, &sender("a", 6, 1), quiet, &[]).unwrap();
        assert!(matches!(&changes[..], [Change::Down { node, .. }] if node == "a"));
        assert_eq!(peers.get("a").unwrap().incarnation, 6);
    }

    #[test]
    fn with_authentication_a_restart_replaces_at_once_and_replays_are_refused() {
        let mut peers = Peers::new("me", limits(true));
        let start = Instant::now();
        beat(&mut peers, &sender("a", 5, 1), start, &[]).unwrap();
        assert_eq!(
            beat(&mut peers, &sender("a", 5, 1), start, &[]),
            Err("replayed")
        );
        let old = Sender {
            sent_millis: NOW_MILLIS - 60_000,
            ..sender("a", 5, 9)
        };
        assert_eq!(beat(&mut peers, &old, start, &[]), Err("replayed"));
        let changes = beat(&mut peers, &sender("a", 6, 1), start, &[]).unwrap();
        assert_eq!(changes.len(), 1);
        assert_eq!(
            beat(&mut peers, &sender("a", 5, 10), start, &[]),
            Err("stale")
        );
    }

    #[test]
    fn a_leaving_needs_the_known_incarnation_and_the_down_set_is_bounded() {
        let mut peers = Peers::new("me", limits(false));
        let now = Instant::now();
        beat(&mut peers, &sender("a", 5, 1), now, &[]).unwrap();
        assert_eq!(
            peers.leaving(&sender("a", 4, 2), now, NOW_MILLIS),
            Err("unknown")
        );
        assert!(
            peers
                .leaving(&sender("a", 5, 2), now, NOW_MILLIS)
                .unwrap()
                .is_some()
        );
        assert!(peers.known_down("a"));
        for n in 0..20 {
            let node = format!("n{n}");
            beat(&mut peers, &sender(&node, 1, 1), now, &[]).unwrap();
            peers
                .leaving(&sender(&node, 1, 2), now + SECOND * n, NOW_MILLIS)
                .unwrap();
        }
        assert!(peers.down.len() <= 4);
    }
}
