//! Opening the store's log: choosing the generation that is the store, replaying it, cutting
//! only a torn tail, refusing damage, and the `--repair` that salvages a damaged log.
//!
//! Invariants:
//! - **Recovery never destroys an acknowledged byte.** It cuts only a torn tail: the
//!   fragment or never-written pages the runtime drops (see `runtime::buffer::paged`), and a
//!   last record cut short (see [`super::log`]); bytes a crash can leave, never
//!   acknowledged. Anything else that fails to verify, anywhere in the log, stops the start
//!   with [`StartError::Damaged`], naming the file and offset, and changes nothing.
//! - **The newest generation with `Current` is the store.** A newer one without it is a
//!   rewrite a crash interrupted (it never served a write) and is removed; older ones are
//!   removed once the current one is found.
//! - **Repair copies first**: the damaged log is copied aside, byte for byte and synced,
//!   before anything is written; then every record that verifies, on both sides of the
//!   damage, is kept in a new generation.

use super::log::{self, Data, Record};
use runtime::buffer::paged::{CHECKSUM_SIZE, CacheRef, Writer, salvage_page};
use runtime::prelude::*;
use std::num::NonZeroU16;

/// The partition the store's logs live in.
pub const PARTITION: &str = "kv";

/// The log's page size and the store's write buffer.
pub const PAGE: u16 = 4096;
pub const BUFFER: usize = 64 * (PAGE as usize + CHECKSUM_SIZE as usize);
const PHYSICAL: u64 = PAGE as u64 + CHECKSUM_SIZE as u64;

/// The name of a generation's log.
pub fn name(generation: u64) -> String {
    format!("log.{generation}")
}

/// The first version's log, migrated to a generation on start.
const LEGACY: &[u8] = b"log";

/// A recovered store: its data, its log's writer (appends continue after the last whole
/// record) and the log's generation.
pub struct Opened {
    pub data: Data,
    pub writer: Writer,
    pub generation: u64,
}

/// Why the store cannot start.
#[derive(Debug)]
pub enum StartError {
    /// The log holds bytes that fail to verify where no crash leaves them.
    Damaged {
        /// The log, as `kv/<name>` under the data directory.
        file: String,
        /// Where, in bytes from the start of the file.
        offset: u64,
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
                 was changed. Start with --repair to keep every record that verifies on both \
                 sides of the damage (the damaged log is first copied aside, to \
                 {file}.damaged-<time>), or restore the data directory from a backup"
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

/// Opens `name`'s log and reads every byte it holds; damage is refused.
async fn read(
    runtime: &runtime::Context,
    cache: &CacheRef,
    name: &[u8],
) -> Result<(Writer, Vec<u8>), StartError> {
    let damaged = |error: runtime::Error| match error {
        runtime::Error::BlobCorrupt { offset, .. } => StartError::Damaged {
            file: file(name),
            offset,
            what: "a page that fails its checksum".into(),
        },
        error => StartError::Storage(error),
    };
    let (blob, size) = runtime.open(PARTITION, name).await?;
    let writer = Writer::new(blob, size, BUFFER, cache.clone())
        .await
        .map_err(damaged)?;
    let size = writer.size();
    let mut bytes = Vec::with_capacity(size as usize);
    while (bytes.len() as u64) < size {
        let offset = bytes.len() as u64;
        let len = (size - offset).min(64 * u64::from(PAGE)) as usize;
        let chunk = writer.read_at(offset, len).await.map_err(damaged)?;
        bytes.extend_from_slice(&chunk);
    }
    Ok((writer, bytes))
}

/// Opens the store: the current generation replayed (a torn tail cut), or a first-version
/// log migrated, or a new empty log. Damage stops it with [`StartError::Damaged`].
pub async fn open(runtime: &runtime::Context, cache: &CacheRef) -> Result<Opened, StartError> {
    let (generations, legacy) = generations(runtime).await?;
    for (index, &generation) in generations.iter().enumerate() {
        let name = name(generation);
        let (writer, bytes) = read(runtime, cache, name.as_bytes()).await?;
        let mut data = Data::default();
        let replayed = log::replay(&bytes, &mut data).map_err(|damage| StartError::Damaged {
            file: file(name.as_bytes()),
            offset: file_offset(damage.at),
            what: damage.what,
        })?;
        if !replayed.current {
            // A rewrite a crash interrupted: it never served a write.
            drop(writer);
            remove(runtime, name.as_bytes()).await?;
            continue;
        }
        let writer = if (replayed.end as u64) < writer.size() {
            writer.truncate(replayed.end as u64).await?
        } else {
            writer
        };
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
        });
    }
    let mut data = Data::default();
    if legacy {
        let (writer, bytes) = read(runtime, cache, LEGACY).await?;
        drop(writer);
        log::legacy::replay(&bytes, &mut data);
    }
    let writer = current_generation(runtime, cache, 1, &data).await?;
    if legacy {
        remove(runtime, LEGACY).await?;
    }
    Ok(Opened {
        data,
        writer,
        generation: 1,
    })
}

/// Drops the keys whose deadline has passed.
fn sweep_due(data: &mut Data) {
    for key in data.expired(log::now_ms(), usize::MAX) {
        data.remove(&key);
    }
}

/// Writes generation `generation` as a snapshot of `data` (what is due left out), unsynced
/// and without `Current`: what a rewrite writes before it takes over.
pub async fn write_generation(
    runtime: &runtime::Context,
    cache: &CacheRef,
    generation: u64,
    data: &Data,
) -> Result<Writer, runtime::Error> {
    let name = name(generation);
    // A leftover of an attempt that never took over.
    match runtime.remove(PARTITION, Some(name.as_bytes())).await {
        Ok(()) | Err(runtime::Error::BlobMissing(_)) | Err(runtime::Error::PartitionMissing(_)) => {
        }
        Err(error) => return Err(error),
    }
    let (blob, size) = runtime.open(PARTITION, name.as_bytes()).await?;
    let mut writer = Writer::new(blob, size, BUFFER, cache.clone()).await?;
    let mut chunk = Record::Header { generation }.bytes();
    let now = log::now_ms();
    for (key, entry) in data.entries() {
        if entry.expires.is_some_and(|deadline| deadline <= now) {
            continue;
        }
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
    Ok(writer.append(&chunk).await?.0)
}

/// Writes generation `generation` from `data` and makes it the store (`Current`, synced).
async fn current_generation(
    runtime: &runtime::Context,
    cache: &CacheRef,
    generation: u64,
    data: &Data,
) -> Result<Writer, runtime::Error> {
    let writer = write_generation(runtime, cache, generation, data).await?;
    let (writer, _) = writer.append(&Record::Current.bytes()).await?;
    writer.sync().await
}

/// Removes generation `generation`'s log (one a rewrite replaced); a failure is reported,
/// not fatal: the next start removes it.
pub async fn remove_generation(runtime: &runtime::Context, generation: u64) {
    if let Err(error) = remove(runtime, name(generation).as_bytes()).await {
        eprintln!("kv: removing the replaced log failed ({error}); the next start does");
    }
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
    pub damaged_pages: u64,
}

/// Repairs the newest log: copies it aside, keeps every record that verifies on both sides
/// of its damage, and writes them as the next generation, which becomes the store. A log
/// that is not damaged is left as it is (`None`).
pub async fn repair(
    runtime: &runtime::Context,
    cache: &CacheRef,
) -> Result<Option<Repaired>, StartError> {
    match open(runtime, cache).await {
        Ok(opened) => {
            drop(opened);
            return Ok(None);
        }
        Err(StartError::Damaged { .. }) => {}
        Err(error) => return Err(error),
    }
    let (generations, legacy) = generations(runtime).await?;
    let (name, next, version) = match generations.first() {
        Some(&generation) => (name(generation).into_bytes(), generation + 1, 2),
        None if legacy => (LEGACY.to_vec(), 1, 1),
        None => return Ok(None),
    };
    let (blob, size) = runtime.open(PARTITION, &name).await?;
    // The copy, first.
    let mut copy_name = name.clone();
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
    // Runs of verified bytes, split where a page fails or ends short of a whole page.
    let page_size = NonZeroU16::new(PAGE).expect("non-zero");
    let mut segments = vec![Vec::new()];
    let mut damaged_pages = 0;
    for page in 0..size / PHYSICAL {
        match salvage_page(&blob, page_size, page).await? {
            Some(bytes) => {
                let short = bytes.len() < usize::from(PAGE);
                segments.last_mut().expect("one").extend_from_slice(&bytes);
                if short {
                    segments.push(Vec::new());
                }
            }
            None => {
                damaged_pages += 1;
                segments.push(Vec::new());
            }
        }
    }
    drop(blob);
    let mut data = Data::default();
    let records = if version == 1 {
        // A first-version log has no checksums of its own to find a record after damage
        // by: what precedes the damage is kept.
        log::legacy::replay(&segments[0], &mut data);
        data.len()
    } else {
        log::salvage(&segments, &mut data)
    };
    sweep_due(&mut data);
    let writer = current_generation(runtime, cache, next, &data).await?;
    drop(writer);
    remove(runtime, &name).await?;
    Ok(Some(Repaired {
        copy: file(&copy_name),
        records,
        damaged_pages,
    }))
}
