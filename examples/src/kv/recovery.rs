//! Opening the store's log: choosing the generation that is the store, replaying it, setting
//! aside and reporting a torn tail, refusing damage, and the `--repair` that salvages a
//! damaged log.
//!
//! Invariants:
//! - **Recovery never destroys an acknowledged byte, and never cuts silently.** What it cuts
//!   is a tail a crash can leave: the runtime's (a fragment, never-written pages, a last-page
//!   rewrite whose newest checksum fails; see `runtime::buffer::paged`) and the store's own
//!   (a last record cut short, see [`super::log`]). Each cut is copied to a file beside the
//!   log first (`<log>.cut-<offset>`), and reported in the [`Report`] that [`open`] returns:
//!   `kv` prints it on start and exposes it as metrics. The same bytes can be damage (a
//!   truncated or zeroed end, a flipped bit): that is why they are kept and reported, not
//!   dropped. With `--strict` ([`Options::strict`](super::Options)) even these are refused.
//!   Anything else that fails to verify, anywhere in the log, stops the start with
//!   [`StartError::Damaged`], naming the file and offset, and changes nothing.
//! - **Nothing is cut before its log is known to be the store.** Each generation is opened
//!   strictly first; a torn tail is cut only from the generation that becomes the store (what
//!   the cut keeps holds `Current`). A refusal therefore changes nothing, and the next start
//!   finds the same log and refuses it again.
//! - **The newest generation with `Current` is the store.** A newer one without it is a
//!   rewrite a crash interrupted: it never served a write (a rewrite's first commit removes its
//!   predecessor before it answers anyone), so it is removed once the older one, which holds
//!   everything it could have held, has opened as the store. A generation without `Current`
//!   and no older one to fall back on is never removed: it is refused as damaged (its end,
//!   where `Current` or later records were, was lost), unless its file is empty (a store whose
//!   first write never landed, or a log truncated to nothing), which starts an empty store and
//!   says so in the report. Older generations are removed once the current one is found.
//! - **Repair copies first**: the damaged log is copied aside, byte for byte and synced,
//!   before anything is written; then every record that verifies by its own checksums, in
//!   every page whether the page's checksum holds or not, is kept in a new generation.

use super::log::{self, Data, Record};
use prometheus_client::metrics::gauge::Gauge;
use runtime::buffer::paged::{
    CHECKSUM_SIZE, CacheRef, Recovery, SetAside, TornTail, Writer, verified_len,
};
use runtime::prelude::*;
use std::num::NonZeroU16;

/// The partition the store's logs live in.
pub const PARTITION: &str = "kv";

/// The log's page size and the store's write buffer.
pub const PAGE: u16 = 4096;
/// The store's write buffer: 64 physical pages (a page and its checksum each).
pub const BUFFER: usize = 64 * (PAGE as usize + CHECKSUM_SIZE as usize);
const PHYSICAL: u64 = PAGE as u64 + CHECKSUM_SIZE as u64;

/// The name of a generation's log.
pub fn name(generation: u64) -> String {
    format!("log.{generation}")
}

/// The first version's log, migrated to a generation on start.
const LEGACY: &[u8] = b"log";

/// A recovered store: its data, its log's writer (appends continue after the last whole
/// record), the log's generation, and what opening the logs found and did.
pub struct Opened {
    /// The data the logs held.
    pub data: Data,
    /// The writer of the current log, after its last whole record.
    pub writer: Writer,
    /// The current log's generation.
    pub generation: u64,
    /// What opening the logs found and did.
    pub report: Report,
}

/// Shows the generation, the report and how many keys were recovered (not the data).
impl std::fmt::Debug for Opened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opened")
            .field("generation", &self.generation)
            .field("keys", &self.data.len())
            .field("writer", &self.writer)
            .field("report", &self.report)
            .finish()
    }
}

/// What opening the store's logs found and did: one entry per log opened.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// One entry per log opened.
    pub logs: Vec<LogReport>,
    /// What else the opening did that may have lost data: an empty only log replaced by a new
    /// store.
    pub notes: Vec<String>,
}

/// What opening one log found and did.
#[derive(Clone, Debug)]
pub struct LogReport {
    /// The log, as `kv/<hex> (<name>)`.
    pub file: String,
    /// What the runtime's recovery of its pages found and cut.
    pub pages: Recovery,
    /// A last record cut short, which the store cut (after the runtime's recovery).
    pub torn_record: Option<TornRecord>,
    /// Pages a lost machine wrote out of order after the last sync: the file offset where a
    /// synced partial page's bytes end with pages after it that its replay could not read
    /// (the store cut there, at its last whole record).
    pub out_of_order: Option<u64>,
}

/// A last record cut short: where it started and where its bytes are kept.
#[derive(Clone, Debug)]
pub struct TornRecord {
    /// Where it starts, in bytes from the start of the file.
    pub offset: u64,
    /// Its bytes in the log (page trailers included), as kept aside.
    pub set_aside: SetAside,
}

impl Report {
    /// Pages the runtime read to find the logs' ends.
    pub fn pages_read(&self) -> u64 {
        self.logs.iter().map(|log| log.pages.pages_read).sum()
    }

    /// Bytes cut from the logs, in all (kept aside).
    pub fn bytes_cut(&self) -> u64 {
        self.logs
            .iter()
            .map(|log| {
                log.pages.cut_bytes()
                    + log
                        .torn_record
                        .as_ref()
                        .map_or(0, |torn| torn.set_aside.len)
            })
            .sum()
    }

    /// Cuts made, in all (a missing end, which has no bytes, counts), and notes.
    pub fn cuts(&self) -> usize {
        let cuts: usize = self
            .logs
            .iter()
            .map(|log| log.pages.cuts.len() + usize::from(log.torn_record.is_some()))
            .sum();
        cuts + self.notes.len()
    }

    /// One line per cut, saying what was cut, where, why and where it is kept; none when the
    /// logs were whole.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = self.notes.clone();
        for log in &self.logs {
            let kept = |set_aside: &Option<SetAside>| match set_aside {
                Some(set_aside) => format!(
                    "kept in {PARTITION}/{} ({} bytes)",
                    set_aside.file.rsplit('/').next().unwrap_or(&set_aside.file),
                    set_aside.len
                ),
                None => "no bytes to keep".to_string(),
            };
            for cut in &log.pages.cuts {
                lines.push(format!(
                    "recovery of {} cut {} bytes at byte {} of the file: {}; {}",
                    log.file,
                    cut.len,
                    cut.offset,
                    cut.reason,
                    kept(&log.pages.set_aside)
                ));
            }
            if let (Some(torn), Some(end)) = (&log.torn_record, log.out_of_order) {
                lines.push(format!(
                    "recovery of {} cut at byte {} of the file: the synced bytes end at byte {} \
                     in a partial page, and pages after it that a lost machine wrote out of \
                     order (since the last sync) do not all verify; {}",
                    log.file,
                    torn.offset,
                    end,
                    kept(&Some(torn.set_aside.clone()))
                ));
            } else if let Some(torn) = &log.torn_record {
                lines.push(format!(
                    "recovery of {} cut a last record cut short at byte {} of the file (a \
                     write a crash interrupted, or a damaged end); {}",
                    log.file,
                    torn.offset,
                    kept(&Some(torn.set_aside.clone()))
                ));
            }
        }
        lines
    }
}

/// The last opening's [`Report`] as gauges: `kv_recovery_pages_read`,
/// `kv_recovery_bytes_kept` (the store's log after opening), `kv_recovery_bytes_cut` and
/// `kv_recovery_cuts` (0 when the logs were whole).
#[derive(Clone, Debug, Default)]
pub struct ReportMetrics {
    pages_read: Gauge,
    bytes_kept: Gauge,
    bytes_cut: Gauge,
    cuts: Gauge,
}

impl ReportMetrics {
    /// Registers the gauges with the runtime's metrics.
    pub fn register(context: &runtime::Context) -> Self {
        use runtime::Metrics as _;
        let metrics = ReportMetrics::default();
        let gauges = [
            (
                "kv_recovery_pages_read",
                "Log pages read to find the logs' ends on the last opening",
                &metrics.pages_read,
            ),
            (
                "kv_recovery_bytes_kept",
                "Bytes of the store's log kept by the last opening",
                &metrics.bytes_kept,
            ),
            (
                "kv_recovery_bytes_cut",
                "Bytes the last opening cut from the logs (kept beside them)",
                &metrics.bytes_cut,
            ),
            (
                "kv_recovery_cuts",
                "Cuts the last opening made (each printed on start)",
                &metrics.cuts,
            ),
        ];
        for (name, help, gauge) in gauges {
            context.register(name, help, gauge.clone());
        }
        metrics
    }

    /// Sets the gauges from `report`, the store's log holding `kept` bytes.
    pub fn record(&self, report: &Report, kept: u64) {
        let clamp = |value: u64| i64::try_from(value).unwrap_or(i64::MAX);
        self.pages_read.set(clamp(report.pages_read()));
        self.bytes_kept.set(clamp(kept));
        self.bytes_cut.set(clamp(report.bytes_cut()));
        self.cuts.set(clamp(report.cuts() as u64));
    }
}

/// Why the store cannot start.
#[derive(Debug)]
pub enum StartError {
    /// `--strict`: the log ends in a tail that recovery would cut (a crash may have torn it,
    /// or it is damaged); nothing was changed.
    Torn {
        /// The log, as `kv/<name>` under the data directory.
        file: String,
        /// Where the bytes that would be cut start, in bytes from the start of the file.
        offset: u64,
        /// What the cut bytes held.
        what: String,
    },
    /// The log holds bytes that fail to verify where no crash leaves them.
    Damaged {
        /// The log, as `kv/<name>` under the data directory.
        file: String,
        /// Where, in bytes from the start of the file.
        offset: u64,
        /// What failed to verify.
        what: String,
    },
    /// The storage failed (or is not a usable directory).
    Storage(runtime::Error),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Damaged { file, offset, what } => write!(
                f,
                "the log {file} is damaged at byte {offset} of the file ({what}); nothing \
                 was changed. Start with --repair to keep every record that verifies, on both \
                 sides of the damage (the damaged log is first copied aside, as \
                 {}.damaged-<time> in {PARTITION}/), or restore the data directory from a \
                 backup",
                plain_name(file)
            ),
            StartError::Torn { file, offset, what } => write!(
                f,
                "the log {file} ends in a tail that recovery would cut, from byte {offset} of \
                 the file ({what}); --strict refuses it, and nothing was changed. Start \
                 without --strict to cut it: the bytes cut are first copied beside the log, \
                 to {}.cut-<offset>, and reported",
                file.split(' ').next().unwrap_or(file)
            ),
            StartError::Storage(error) => write!(f, "the storage failed: {error}"),
        }
    }
}

impl std::error::Error for StartError {}

impl From<runtime::Error> for StartError {
    fn from(error: runtime::Error) -> Self {
        StartError::Storage(error)
    }
}

/// The blob name in a label made by [`file`]: `log.2` in `kv/6c6f672e32 (log.2)`.
fn plain_name(file: &str) -> &str {
    file.split_once(" (")
        .map_or(file, |(_, name)| name.trim_end_matches(')'))
}

/// The label of blob `name`'s file under the data directory.
fn file(name: &[u8]) -> String {
    let hex: String = name.iter().map(|byte| format!("{byte:02x}")).collect();
    format!("{PARTITION}/{hex} ({})", String::from_utf8_lossy(name))
}

/// The file offset of logical byte `at` of a log.
fn file_offset(at: u64) -> u64 {
    at / u64::from(PAGE) * PHYSICAL + at % u64::from(PAGE)
}

/// The generations present, newest first, and whether a first-version log is.
async fn generations(runtime: &runtime::Context) -> Result<(Vec<u64>, bool), StartError> {
    let names = match runtime.scan(PARTITION).await {
        Ok(names) => names,
        Err(runtime::Error::PartitionMissing(_)) => Vec::new(),
        Err(error) => return Err(error.into()),
    };
    let mut generations: Vec<u64> = names
        .iter()
        .filter_map(|name| {
            std::str::from_utf8(name.strip_prefix(b"log.")?)
                .ok()?
                .parse()
                .ok()
        })
        .collect();
    generations.sort_unstable_by(|a, b| b.cmp(a));
    Ok((generations, names.iter().any(|name| name == LEGACY)))
}

/// Opens `name`'s log: the runtime recovers its pages (setting a torn tail aside, or with
/// [`TornTail::Refuse`] refusing it), and damage is refused.
async fn open_log(
    runtime: &runtime::Context,
    cache: &CacheRef,
    name: &[u8],
    torn: TornTail,
) -> Result<(Writer, LogReport), StartError> {
    let (blob, size) = runtime.open(PARTITION, name).await?;
    let (writer, pages) = Writer::open(blob, size, BUFFER, cache.clone(), torn)
        .await
        .map_err(|error| damaged(name, error))?;
    let report = LogReport {
        file: file(name),
        pages,
        torn_record: None,
        out_of_order: None,
    };
    Ok((writer, report))
}

/// Opens `name`'s log and reads every byte it holds (a first-version log, read once to be
/// migrated); damage is refused.
async fn read(
    runtime: &runtime::Context,
    cache: &CacheRef,
    name: &[u8],
    torn: TornTail,
) -> Result<(Writer, Vec<u8>, LogReport), StartError> {
    let (writer, report) = open_log(runtime, cache, name, torn).await?;
    let size = writer.size();
    let mut bytes = Vec::with_capacity(size as usize);
    while (bytes.len() as u64) < size {
        let offset = bytes.len() as u64;
        let len = (size - offset).min(64 * u64::from(PAGE)) as usize;
        let chunk = writer
            .read_at(offset, len)
            .await
            .map_err(|error| damaged(name, error))?;
        bytes.extend_from_slice(&chunk);
    }
    Ok((writer, bytes, report))
}

/// Opens `name`'s log and replays it into `data` a piece at a time (a start holds the data
/// and one piece, not the whole log); damage is refused.
async fn replay(
    runtime: &runtime::Context,
    cache: &CacheRef,
    name: &[u8],
    data: &mut Data,
    torn: TornTail,
) -> Result<(Writer, log::Replayed, LogReport), StartError> {
    let (writer, mut report) = open_log(runtime, cache, name, torn).await?;
    let size = writer.size();
    let mut replayer = log::Replayer::default();
    let feed = |replayer: &mut log::Replayer, piece: &[u8], data: &mut Data| {
        replayer
            .feed(piece, data)
            .map_err(|damage| StartError::Damaged {
                file: file(name),
                offset: file_offset(damage.at),
                what: damage.what,
            })
    };
    let mut offset = 0;
    while offset < size {
        let len = (size - offset).min(64 * u64::from(PAGE));
        match writer.read_at(offset, len as usize).await {
            Ok(piece) => feed(&mut replayer, &piece, data)?,
            Err(error @ runtime::Error::BlobCorrupt { .. }) => {
                let Some(end) =
                    synced_partial_end(&writer, offset, &error, &mut replayer, data, &feed).await?
                else {
                    return Err(damaged(name, error));
                };
                if torn == TornTail::Refuse {
                    return Err(StartError::Torn {
                        file: file(name),
                        offset: end,
                        what: "pages past a synced partial page, written out of order by a \
                               lost machine"
                            .into(),
                    });
                }
                report.out_of_order = Some(end);
                break;
            }
            Err(error) => return Err(damaged(name, error)),
        }
        offset += len;
    }
    Ok((writer, replayer.finish(), report))
}

/// A replay that failed at a page reading from `offset`: if that page still verifies only as a
/// partial page (a slot shorter than the page) and no page after it was rewritten after a
/// sync, it is the page the last completed sync closed, whose rewrite a lost machine did not
/// keep while it kept pages after it. (The writer rewrites a page only to add bytes after a
/// sync closed it partial, and only once that sync returned; so a page rewritten that way
/// after this one proves this one's rewrite was synced, and its failing slot is damage.)
/// Feeds the replay the pages before it and its synced bytes, and returns the file offset
/// where those end; `None` when it is damage: the page verifies nothing, or verifies only as
/// partial with such a page after it (see `runtime::buffer::paged::rewritten_after_a_sync`).
async fn synced_partial_end(
    writer: &Writer,
    offset: u64,
    error: &runtime::Error,
    replayer: &mut log::Replayer,
    data: &mut Data,
    feed: &impl Fn(&mut log::Replayer, &[u8], &mut Data) -> Result<(), StartError>,
) -> Result<Option<u64>, StartError> {
    let runtime::Error::BlobCorrupt { offset: at, .. } = error else {
        return Ok(None);
    };
    let page = at / PHYSICAL;
    let page_size = NonZeroU16::new(PAGE).expect("non-zero");
    let Some(synced) = runtime::buffer::paged::salvage_page(writer.blob(), page_size, page).await?
    else {
        return Ok(None);
    };
    if synced.len() >= usize::from(PAGE) {
        return Ok(None);
    }
    // A full page that once closed a sync keeps that state's slot beside its full one: if the
    // full one is damaged, the page too verifies only as partial. A page after it that a sync
    // closed and the writer then rewrote proves a sync completed after this page's rewrite
    // was written, so that rewrite was durable: this is damage, not a lost machine's tail.
    let pages = writer.size().div_ceil(u64::from(PAGE));
    for later in page + 1..pages {
        let physical = writer
            .blob()
            .read_at(later * PHYSICAL, PHYSICAL as usize, Default::default())
            .await?
            .coalesce();
        if runtime::buffer::paged::rewritten_after_a_sync(page_size, later, &physical) {
            return Ok(None);
        }
    }
    let start = page * u64::from(PAGE);
    if start > offset {
        let before = writer.read_at(offset, (start - offset) as usize).await?;
        feed(replayer, &before, data)?;
    }
    feed(replayer, &synced, data)?;
    Ok(Some(page * PHYSICAL + synced.len() as u64))
}

/// A read of log `name` that failed: damage where a page fails its checksum, a torn tail
/// where a strict opening refused one.
fn damaged(name: &[u8], error: runtime::Error) -> StartError {
    match error {
        runtime::Error::BlobCorrupt { offset, .. } => StartError::Damaged {
            file: file(name),
            offset,
            what: "a page that fails its checksum".into(),
        },
        runtime::Error::BlobTorn { offset, what, .. } => StartError::Torn {
            file: file(name),
            offset,
            what,
        },
        error => StartError::Storage(error),
    }
}

/// Cuts a last record cut short (the log's whole records end at `end`): set aside, or with
/// [`TornTail::Refuse`] refused.
async fn cut_torn_record(
    name: &[u8],
    writer: Writer,
    end: u64,
    report: &mut LogReport,
    torn: TornTail,
) -> Result<Writer, StartError> {
    if end == writer.size() {
        return Ok(writer);
    }
    let offset = file_offset(end);
    if torn == TornTail::Refuse {
        return Err(StartError::Torn {
            file: file(name),
            offset,
            what: format!(
                "a last record cut short: {} bytes of it are in the log",
                writer.size() - end
            ),
        });
    }
    let (writer, set_aside) = writer.truncate_aside(end).await?;
    report.torn_record = set_aside.map(|set_aside| TornRecord { offset, set_aside });
    Ok(writer)
}

/// Opens the store: the current generation replayed (a torn tail set aside and reported),
/// or a first-version log migrated, or a new empty log. Damage stops it with
/// [`StartError::Damaged`], having changed nothing but a torn tail (set aside); with
/// [`TornTail::Refuse`] a torn tail stops it too ([`StartError::Torn`]), changing nothing.
///
/// A generation newer than the current one is a rewrite a crash interrupted: it never served
/// a write (a rewrite's first commit removes its predecessor before it answers anyone), so it
/// is removed, once the current one has opened. If it is damaged and an older generation is
/// current, the older one is the store and the damaged one is left where it is, whatever it
/// holds: the older one still exists, so no answer was given from the newer one (the store
/// answers nothing from a new generation before its predecessor's removal is durable), and
/// the older holds every acknowledged write. A lost machine can leave that shape with
/// `Current` in it: the first commit's pages written out of order, a page of it lost and the
/// one holding `Current` kept (found by the deterministic crash test, seed 2708). A
/// generation without `Current` that has no older one (nor a first-version log) to fall back
/// on is refused as damaged, unless it holds nothing at all.
pub async fn open(
    runtime: &runtime::Context,
    cache: &CacheRef,
    torn: TornTail,
) -> Result<Opened, StartError> {
    let (generations, legacy) = generations(runtime).await?;
    let mut report = Report::default();
    // Interrupted rewrites, removed once the store is chosen.
    let mut interrupted: Vec<u64> = Vec::new();
    let mut damage: Option<StartError> = None;
    for (index, &generation) in generations.iter().enumerate() {
        let name = name(generation);
        let older = index + 1 < generations.len() || legacy;
        let mut data = Data::default();
        // Strictly first: nothing is cut before this generation is known to be the store.
        let opened = match replay(runtime, cache, name.as_bytes(), &mut data, TornTail::Refuse)
            .await
        {
            Err(StartError::Torn { .. }) if !keeps_current(runtime, name.as_bytes()).await? => {
                // What a cut would keep has no `Current`: a rewrite a crash interrupted
                // (passed over, like a whole one), or, with nothing older, the only log,
                // whose end was lost: refused before anything is cut.
                if older {
                    interrupted.push(generation);
                    continue;
                }
                return Err(lost_current(&name, None));
            }
            Err(error @ StartError::Torn { .. }) if torn == TornTail::Refuse => Err(error),
            Err(StartError::Torn { .. }) => {
                data = Data::default();
                replay(runtime, cache, name.as_bytes(), &mut data, torn).await
            }
            other => other,
        };
        let (writer, replayed, mut log_report) = match opened {
            Ok(opened) => opened,
            Err(error @ StartError::Damaged { .. }) if index + 1 < generations.len() => {
                // A rewrite whose first commit a crash interrupted: its predecessor is still
                // here, so nothing was answered from it (see the function's docs), even if
                // what survived of it says `Current`. It stays where it is (for `--repair`,
                // or for the next rewrite, which takes its place).
                if let StartError::Damaged { file, offset, what } = &error {
                    report.notes.push(format!(
                        "{file}, a rewrite a crash interrupted during its first commit, is \
                         damaged at byte {offset} of the file ({what}); the generation before \
                         it is the store (nothing was answered from this one), and it is left \
                         where it is"
                    ));
                }
                damage.get_or_insert(error);
                continue;
            }
            // This generation's own failure: it is the store (a newer damaged one passed over
            // never served), so `--repair` must rebuild from it, and the error names it.
            Err(error) => return Err(error),
        };
        if !replayed.current {
            if !older {
                if replayed.end > 0 || writer.size() > 0 {
                    return Err(lost_current(&name, Some(replayed.end)));
                }
                // Nothing at all: a store whose first write never landed, or a log cut to
                // nothing. Started afresh, and said so.
                report.notes.push(format!(
                    "{} was empty (a new store whose first write never landed, or a log \
                     truncated to nothing); an empty store was started",
                    file(name.as_bytes())
                ));
            }
            report.logs.push(log_report);
            drop(writer);
            interrupted.push(generation);
            continue;
        }
        let writer =
            cut_torn_record(name.as_bytes(), writer, replayed.end, &mut log_report, torn).await?;
        // A missing end (the log ended on a full page) is closed by a sync, so the next
        // start does not report it again.
        let writer = if log_report.pages.is_clean() {
            writer
        } else {
            writer.sync().await?
        };
        report.logs.push(log_report);
        for &newer in &interrupted {
            eprintln!(
                "kv: removing {}, a rewrite a crash interrupted (it never served a write)",
                file(self::name(newer).as_bytes())
            );
            remove(runtime, self::name(newer).as_bytes()).await?;
        }
        for &older in &generations[index + 1..] {
            remove(runtime, self::name(older).as_bytes()).await?;
        }
        if legacy {
            remove(runtime, LEGACY).await?;
        }
        sweep_due(&mut data);
        return Ok(Opened {
            data,
            writer,
            generation,
            report,
        });
    }
    if let Some(damage) = damage {
        return Err(damage);
    }
    let mut data = Data::default();
    if legacy {
        let (writer, bytes, log_report) = read(runtime, cache, LEGACY, torn).await?;
        report.logs.push(log_report);
        drop(writer);
        let replayed = log::legacy::replay(&bytes, &mut data);
        if let Err(at) = replayed {
            return Err(StartError::Damaged {
                file: file(LEGACY),
                offset: file_offset(at as u64),
                what: "a record of the first version's log that does not parse".into(),
            });
        }
    }
    let first = generations.first().map_or(1, |newest| newest + 1);
    let writer = current_generation(runtime, cache, first, &data).await?;
    for &newer in &interrupted {
        remove(runtime, self::name(newer).as_bytes()).await?;
    }
    if legacy {
        remove(runtime, LEGACY).await?;
    }
    Ok(Opened {
        data,
        writer,
        generation: first,
        report,
    })
}

/// The refusal of generation `name`, which has no `Current` record and no older log to fall
/// back on: its end, where `Current` (and maybe later records) were, was lost. `end` is where
/// its whole records end, when the log is whole; `None` when its tail would be cut (and what
/// the cut keeps has no `Current`).
fn lost_current(name: &str, end: Option<u64>) -> StartError {
    let (offset, how) = match end {
        Some(end) => (file_offset(end), "it is whole but has no Current record"),
        None => (
            0,
            "its end is torn or damaged, and what a cut would keep has no Current record",
        ),
    };
    StartError::Damaged {
        file: file(name.as_bytes()),
        offset,
        what: format!(
            "the only log, and {how}: a log is the store only once its Current record is \
             durable, so its end, where Current was, was lost"
        ),
    }
}

/// Whether what a cut of log `name`'s torn tail would keep (its pages that verify, up to the
/// tail) holds `Current`. Reads only.
async fn keeps_current(runtime: &runtime::Context, name: &[u8]) -> Result<bool, StartError> {
    let (segments, _) = salvage_pages(runtime, name, Pages::Verified).await?;
    Ok(log::salvage(&segments, &mut Data::default()).1)
}

/// Drops the keys whose deadline has passed.
fn sweep_due(data: &mut Data) {
    for key in data.expired(log::now_ms(), usize::MAX) {
        data.remove(&key);
    }
}

/// Writes generation `generation` as `snapshot`, synced, without `Current`: what a rewrite
/// writes before it takes over.
pub async fn write_generation(
    runtime: &runtime::Context,
    cache: &CacheRef,
    generation: u64,
    snapshot: &log::Snapshot,
) -> Result<Writer, runtime::Error> {
    let name = name(generation);
    // A leftover of an attempt that never took over.
    match runtime.remove(PARTITION, Some(name.as_bytes())).await {
        Ok(()) | Err(runtime::Error::BlobMissing(_)) | Err(runtime::Error::PartitionMissing(_)) => {
        }
        Err(error) => return Err(error),
    }
    let (blob, size) = runtime.open(PARTITION, name.as_bytes()).await?;
    let (mut writer, _) = Writer::new(blob, size, BUFFER, cache.clone()).await?;
    let mut chunk = Record::Header { generation }.bytes();
    // What is due is kept: a replay drops it, and a `PERSIST` logged since the snapshot
    // may have saved it.
    for (key, entry) in snapshot.iter() {
        Record::Set {
            key: key.clone(),
            value: entry.value.clone(),
            expires: entry.expires,
        }
        .encode(&mut chunk);
        if chunk.len() >= 1 << 20 {
            writer = writer.append(&chunk).await?.0;
            chunk.clear();
        }
    }
    // Synced before it is handed over: damage in a snapshot is then damage, not a tear.
    writer.append(&chunk).await?.0.sync().await
}

/// Writes generation `generation` from `data` and makes it the store (`Current`, synced).
/// With data, the snapshot is synced before `Current` is written (damage in it is then
/// damage, not a tear; the log it replaces still exists until this returns). Without, the
/// header and `Current` go in one sync: a new store's only log never exists durably without
/// `Current`, which a start would refuse.
async fn current_generation(
    runtime: &runtime::Context,
    cache: &CacheRef,
    generation: u64,
    data: &Data,
) -> Result<Writer, runtime::Error> {
    if data.is_empty() {
        let name = name(generation);
        let (blob, size) = runtime.open(PARTITION, name.as_bytes()).await?;
        let (writer, _) = Writer::new(blob, size, BUFFER, cache.clone()).await?;
        let mut records = Record::Header { generation }.bytes();
        Record::Current.encode(&mut records);
        return writer.append(&records).await?.0.sync().await;
    }
    let writer = write_generation(runtime, cache, generation, &data.snapshot()).await?;
    let (writer, _) = writer.append(&Record::Current.bytes()).await?;
    writer.sync().await
}

/// Removes generation `generation`'s log (one a rewrite replaced), durably (the runtime syncs
/// the directory before it answers). The caller answers nobody from the new generation until
/// this succeeds: while the replaced log exists, a
/// start may pass over a damaged newer generation for it (see [`open`]), which is safe only
/// if no write was acknowledged from the newer one alone.
pub async fn remove_generation(
    runtime: &runtime::Context,
    generation: u64,
) -> Result<(), runtime::Error> {
    remove(runtime, name(generation).as_bytes()).await
}

async fn remove(runtime: &runtime::Context, name: &[u8]) -> Result<(), runtime::Error> {
    match runtime.remove(PARTITION, Some(name)).await {
        Ok(()) | Err(runtime::Error::BlobMissing(_)) => Ok(()),
        Err(error) => Err(error),
    }
}

/// What a repair did.
#[derive(Debug)]
pub struct Repaired {
    /// The damaged log's copy.
    pub copy: String,
    /// Records that verified and were kept, and pages that did not verify.
    pub records: usize,
    /// Pages that did not verify.
    pub damaged_pages: u64,
}

/// Repairs a damaged log: copies it aside, keeps every record that verifies on both sides
/// of its damage, and writes them as the next generation, which becomes the store. The log
/// repaired is the oldest generation present: a newer one is a rewrite that never served a
/// write (while its predecessor exists, none was acknowledged from it), even if what survived
/// of it says `Current`, which `open` passes over too. A log that is not damaged is left as
/// it is (`None`).
pub async fn repair(
    runtime: &runtime::Context,
    cache: &CacheRef,
) -> Result<Option<Repaired>, StartError> {
    match open(runtime, cache, TornTail::Refuse).await {
        Ok(opened) => {
            drop(opened);
            return Ok(None);
        }
        // A torn tail is not damage: the start sets it aside and reports it (or, with
        // `--strict`, refuses it). Nothing is cut here, so nothing goes unreported.
        Err(StartError::Torn { .. }) => return Ok(None),
        Err(StartError::Damaged { .. }) => {}
        Err(error) => return Err(error),
    }
    let (generations, legacy) = generations(runtime).await?;
    let Some(&newest) = generations.first() else {
        if !legacy {
            return Ok(None);
        }
        // A first-version log has no checksums of its own to find a record after damage
        // by: what precedes the damage is kept.
        let (segments, damaged_pages) = salvage_pages(runtime, LEGACY, Pages::Verified).await?;
        let mut data = Data::default();
        let _ = log::legacy::replay(&segments[0], &mut data);
        let records = data.len();
        return rebuild(runtime, cache, LEGACY, 1, data, records, damaged_pages).await;
    };
    // The oldest generation present is the one that served: nothing is answered from a
    // generation while its predecessor exists (see `open`), whatever of `Current` survived in
    // the newer one (which holds nothing acknowledged that the oldest does not).
    let generation = *generations.last().expect("one generation at least");
    let (segments, damaged_pages) =
        salvage_pages(runtime, name(generation).as_bytes(), Pages::Raw).await?;
    let mut data = Data::default();
    let (records, _) = log::salvage(&segments, &mut data);
    let name = name(generation);
    rebuild(
        runtime,
        cache,
        name.as_bytes(),
        newest + 1,
        data,
        records,
        damaged_pages,
    )
    .await
}

/// Which bytes a salvage takes from a log's pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pages {
    /// The bytes each page's checksum verifies, in runs split where a page fails or ends short
    /// of a whole page: what a cut of a torn tail keeps (and all a first-version log, whose
    /// records have no checksums of their own, can trust).
    Verified,
    /// Every page's data bytes, verified or not, in one run: records carry checksums of their
    /// own, so a record in a page whose checksum fails (a bit flipped elsewhere in the page, a
    /// trailer a crash tore) is still found, and kept, when it verifies.
    Raw,
}

/// The bytes of log `name` that `pages` says to take, and how many whole pages failed their
/// checksum. Reads 64 pages at a time.
async fn salvage_pages(
    runtime: &runtime::Context,
    name: &[u8],
    pages: Pages,
) -> Result<(Vec<Vec<u8>>, u64), StartError> {
    let (blob, size) = runtime.open(PARTITION, name).await?;
    let page_size = NonZeroU16::new(PAGE).expect("non-zero");
    let mut segments = vec![Vec::new()];
    let mut damaged_pages = 0;
    let mut at = 0;
    while at < size {
        let len = (size - at).min(64 * PHYSICAL);
        let bytes = blob
            .read_at(at, len as usize, runtime::ReadOptions::default())
            .await?
            .coalesce();
        for (index, physical) in bytes.chunks(PHYSICAL as usize).enumerate() {
            let page = at / PHYSICAL + index as u64;
            let whole = physical.len() == PHYSICAL as usize;
            let verified = whole
                .then(|| verified_len(page_size, page, physical))
                .flatten();
            damaged_pages += u64::from(whole && verified.is_none());
            let run = segments.last_mut().expect("one run at least");
            match (pages, verified) {
                (Pages::Raw, _) => {
                    run.extend_from_slice(&physical[..physical.len().min(usize::from(PAGE))]);
                }
                (Pages::Verified, Some(len)) => {
                    run.extend_from_slice(&physical[..len]);
                    if len < usize::from(PAGE) {
                        segments.push(Vec::new());
                    }
                }
                (Pages::Verified, None) => segments.push(Vec::new()),
            }
        }
        at += len;
    }
    Ok((segments, damaged_pages))
}

/// Copies the damaged log `name` aside (synced), writes `data` as generation `next` and
/// makes it the store, then removes `name`.
async fn rebuild(
    runtime: &runtime::Context,
    cache: &CacheRef,
    name: &[u8],
    next: u64,
    mut data: Data,
    records: usize,
    damaged_pages: u64,
) -> Result<Option<Repaired>, StartError> {
    let (blob, size) = runtime.open(PARTITION, name).await?;
    let mut copy_name = name.to_vec();
    copy_name.extend_from_slice(format!(".damaged-{}", log::now_ms()).as_bytes());
    let (copy, _) = runtime.open(PARTITION, &copy_name).await?;
    let mut at = 0;
    while at < size {
        let len = (size - at).min(1 << 20) as usize;
        let bytes = blob
            .read_at(at, len, runtime::ReadOptions::default())
            .await?;
        copy.write_at(at, bytes, runtime::WriteOptions::default())
            .await?;
        at += len as u64;
    }
    copy.sync().await?;
    drop(blob);
    sweep_due(&mut data);
    let writer = current_generation(runtime, cache, next, &data).await?;
    drop(writer);
    remove(runtime, name).await?;
    Ok(Some(Repaired {
        copy: file(&copy_name),
        records,
        damaged_pages,
    }))
}
