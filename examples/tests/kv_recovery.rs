//! The store's recovery, in process, against every damage to the end of its log that a
//! crash or a disk can leave: each single-bit flip of the last page, every truncation of the
//! last page (by one byte up to the whole page), and the last page zeroed, on a log that is
//! the only copy of the data (the generation a rewrite made, its predecessor removed). Not
//! one acknowledged record may be lost without a report: each opening either keeps every
//! record, refuses with the file and offset (changing nothing but what it set aside), or
//! reports what it cut, with the cut bytes in a file beside the log. A strict opening refuses
//! every cut and changes nothing.

use examples::kv::StartError;
use examples::kv::log::{Data, Decoded, Record, decode};
use examples::kv::recovery::{self, PAGE, PARTITION, Report};
use runtime::buffer::paged::{CHECKSUM_SIZE, CacheRef, TornTail};
use runtime::{Config, Context, Runner};
use std::num::{NonZeroU16, NonZeroUsize};
use std::path::{Path, PathBuf};

const PHYSICAL: usize = PAGE as usize + CHECKSUM_SIZE as usize;

fn cache() -> CacheRef {
    CacheRef::new(
        NonZeroU16::new(PAGE).unwrap(),
        NonZeroUsize::new(64).unwrap(),
    )
}

fn hex(name: &str) -> String {
    name.bytes().map(|byte| format!("{byte:02x}")).collect()
}

fn log_path(directory: &Path, generation: u64) -> PathBuf {
    directory
        .join(PARTITION)
        .join(hex(&recovery::name(generation)))
}

/// A record setting key `index` of a group to a value that says which it is.
fn set(group: usize, index: usize) -> Record {
    Record::Set {
        key: format!("key-{group}-{index}").into_bytes(),
        value: bytes::Bytes::from(format!("value {group}/{index} {}", "x".repeat(index * 7))),
        expires: None,
    }
}

/// Builds the store's log as a rewrite leaves it: generation 1 with `groups` commits of ten
/// records, rewritten into generation 2 (its snapshot, then `Current`), then `after` more
/// commits of three records into generation 2, and generation 1 removed. Returns the data
/// every acknowledged commit holds.
async fn build(context: &Context, cache: &CacheRef, groups: usize, after: usize) -> Data {
    let opened = recovery::open(context, cache, TornTail::SetAside)
        .await
        .unwrap();
    assert_eq!(opened.generation, 1);
    let mut data = Data::default();
    let mut writer = opened.writer;
    for group in 0..groups {
        let mut bytes = Vec::new();
        for index in 0..10 {
            let record = set(group, index);
            record.encode(&mut bytes);
            data.apply(record);
        }
        writer = writer.append(&bytes).await.unwrap().0.sync().await.unwrap();
    }
    drop(writer);
    let writer = recovery::write_generation(context, cache, 2, &data.snapshot())
        .await
        .unwrap();
    let mut writer = writer
        .append(&Record::Current.bytes())
        .await
        .unwrap()
        .0
        .sync()
        .await
        .unwrap();
    recovery::remove_generation(context, 1).await.unwrap();
    for group in groups..groups + after {
        let mut bytes = Vec::new();
        for index in 0..3 {
            let record = set(group, index);
            record.encode(&mut bytes);
            data.apply(record);
        }
        writer = writer.append(&bytes).await.unwrap().0.sync().await.unwrap();
    }
    data
}

/// The files of the store's partition, by name, and their bytes.
fn files(directory: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(directory.join(PARTITION))
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            let name = entry.file_name().into_string().unwrap();
            (name, std::fs::read(entry.path()).unwrap())
        })
        .collect();
    files.sort();
    files
}

/// Puts `log` in place as generation 2, the store's only log.
fn install(directory: &Path, log: &[u8]) {
    let partition = directory.join(PARTITION);
    let _ = std::fs::remove_dir_all(&partition);
    std::fs::create_dir_all(&partition).unwrap();
    std::fs::write(log_path(directory, 2), log).unwrap();
}

/// How the damaged logs opened.
#[derive(Debug, Default)]
struct Outcomes {
    whole: usize,
    refused: usize,
    reported: usize,
}

/// Checks that the bytes `report` says were cut are all in the files beside the log, as the
/// damaged log held them.
fn assert_kept_aside(directory: &Path, report: &Report, damaged: &[u8], case: &str) {
    for log in &report.logs {
        if let Some(set_aside) = &log.pages.set_aside {
            let kept = std::fs::read(directory.join(&set_aside.file)).unwrap();
            let from = set_aside.offset as usize;
            assert_eq!(
                kept,
                &damaged[from..],
                "{case}: the pages' cut bytes kept aside"
            );
        }
        if let Some(torn) = &log.torn_record {
            let kept = std::fs::read(directory.join(&torn.set_aside.file)).unwrap();
            assert_eq!(kept.len() as u64, torn.set_aside.len, "{case}");
        }
    }
}

/// Where each key's last record ends in `log`'s logical bytes (page trailers left out).
fn record_ends(log: &[u8]) -> Vec<(Vec<u8>, u64)> {
    let logical: Vec<u8> = log
        .chunks(PHYSICAL)
        .flat_map(|page| page[..page.len().min(PAGE as usize)].to_vec())
        .collect();
    let mut ends = std::collections::HashMap::new();
    let mut at = 0;
    while let Decoded::Whole(record, next) = decode(&logical, at) {
        if let Record::Set { key, .. } = record {
            ends.insert(key, next as u64);
        }
        at = next;
    }
    ends.into_iter().collect()
}

/// Opens the store on `damaged` (generation 2, the only log) and checks that nothing
/// acknowledged (`acknowledged`, whose records end where `ends` says) is lost without a
/// report: the store opens whole; or it refuses, changing nothing (so the next start refuses
/// again); or it reports what it cut, every lost record was past what it kept, and the cut
/// bytes are beside the log, where a strict opening refuses the same log unchanged.
async fn open_damaged(
    context: &Context,
    directory: &Path,
    damaged: &[u8],
    (acknowledged, ends): (&Data, &[(Vec<u8>, u64)]),
    case: &str,
    outcomes: &mut Outcomes,
) {
    install(directory, damaged);
    let before = files(directory);
    let opened = match recovery::open(context, &cache(), TornTail::SetAside).await {
        Ok(opened) => opened,
        Err(StartError::Damaged { file, offset, what }) => {
            assert!(
                file.contains("log.2") && offset <= damaged.len() as u64,
                "{case}"
            );
            assert_eq!(
                files(directory),
                before,
                "{case}: refused, yet changed: {what}"
            );
            outcomes.refused += 1;
            return;
        }
        Err(error) => panic!("{case}: {error}"),
    };
    let report = opened.report.clone();
    let kept = opened.writer.size();
    let mut lost = Vec::new();
    for (key, entry) in acknowledged.entries() {
        match opened.data.get(key) {
            Some(found) => assert_eq!(found, entry, "{case}: a record changed"),
            None => lost.push(key.clone()),
        }
    }
    assert_eq!(
        opened.data.len() + lost.len(),
        acknowledged.len(),
        "{case}: a key nobody wrote"
    );
    drop(opened);
    if report.lines().is_empty() {
        assert!(
            lost.is_empty(),
            "{case}: {} records lost without a report",
            lost.len()
        );
        outcomes.whole += 1;
        return;
    }
    for (key, end) in ends {
        if lost.contains(key) {
            assert!(
                *end > kept,
                "{case}: a record ending at {end} lost, {kept} kept"
            );
        }
    }
    assert_kept_aside(directory, &report, damaged, case);
    // Reported once: the next start finds nothing to cut.
    let again = recovery::open(context, &cache(), TornTail::Refuse).await;
    let again = again.unwrap_or_else(|error| panic!("{case}: reopening: {error}"));
    assert!(
        again.report.lines().is_empty(),
        "{case}: {:?}",
        again.report
    );
    drop(again);
    assert_strict_refusal(context, directory, damaged, case).await;
    outcomes.reported += 1;
}

/// A strict opening of `damaged` refuses it and changes nothing.
async fn assert_strict_refusal(context: &Context, directory: &Path, damaged: &[u8], case: &str) {
    install(directory, damaged);
    let before = files(directory);
    match recovery::open(context, &cache(), TornTail::Refuse).await {
        Ok(_) => panic!("{case}: cut or refused, yet whole strictly"),
        Err(StartError::Damaged { .. } | StartError::Torn { .. }) => {}
        Err(error) => panic!("{case}: {error}"),
    }
    assert_eq!(
        files(directory),
        before,
        "{case}: refused strictly, unchanged"
    );
}

/// The damages of the last page of `pristine` that a part of the test tries: bits
/// `bits` flipped one at a time, and with `truncations`, every cut of one byte up to the
/// whole page and the page zeroed.
fn damages(
    pristine: &[u8],
    bits: std::ops::Range<usize>,
    truncations: bool,
) -> Vec<(String, Vec<u8>)> {
    let last = pristine.len() - PHYSICAL;
    let mut damages = Vec::new();
    for bit in bits {
        let mut damaged = pristine.to_vec();
        damaged[last + bit / 8] ^= 1 << (bit % 8);
        damages.push((format!("bit {bit} of the last page flipped"), damaged));
    }
    if truncations {
        for cut in 1..=PHYSICAL {
            let damaged = pristine[..pristine.len() - cut].to_vec();
            damages.push((format!("cut by {cut} bytes"), damaged));
        }
        let mut zeroed = pristine.to_vec();
        zeroed[last..].fill(0);
        damages.push(("the last page zeroed".to_string(), zeroed));
    }
    damages
}

/// Builds the log with `after` commits after `Current` (see [`build`]), then opens it damaged
/// each way [`damages`] says.
fn no_loss_without_a_report(after: usize, bits: std::ops::Range<usize>, truncations: bool) {
    no_loss_without_a_report_from(30, after, move |pristine| {
        damages(pristine, bits, truncations)
    });
}

/// Builds the log with `groups` commits before its rewrite and `after` after it (see
/// [`build`]), then opens each damaged copy `damages` makes of it.
fn no_loss_without_a_report_from(
    groups: usize,
    after: usize,
    damages: impl FnOnce(&[u8]) -> Vec<(String, Vec<u8>)> + Send + 'static,
) {
    let config = Config::new();
    let directory = config.storage_directory().clone();
    let inside = directory.clone();
    Runner::new(config).start(move |context| async move {
        let directory = inside;
        let acknowledged = build(&context, &cache(), groups, after).await;
        let pristine = std::fs::read(log_path(&directory, 2)).unwrap();
        let ends = record_ends(&pristine);
        assert_eq!(ends.len(), acknowledged.len());
        assert!(pristine.len() > 2 * PHYSICAL, "{}", pristine.len());
        let mut outcomes = Outcomes::default();
        for (damage, damaged) in damages(&pristine) {
            let case = format!("{after} commits after Current, {damage}");
            open_damaged(
                &context,
                &directory,
                &damaged,
                (&acknowledged, &ends),
                &case,
                &mut outcomes,
            )
            .await;
        }
        println!("damaged logs ({after} commits after Current): {outcomes:?}");
        assert!(
            outcomes.refused > 0 || outcomes.reported > 0,
            "{outcomes:?}"
        );
    });
    assert!(
        !directory.exists(),
        "the runner removes its fresh directory"
    );
}

/// Every single-bit flip of the last page, every truncation of it, and the last page zeroed,
/// on two logs: one whose last page holds `Current` (just rewritten), one whose last page
/// holds commits made after it. Split in parts that run in parallel.
#[test]
fn no_damage_to_a_just_rewritten_log_loses_a_record_without_a_report_first_half() {
    no_loss_without_a_report(0, 0..PHYSICAL * 4, false);
}

#[test]
fn no_damage_to_a_just_rewritten_log_loses_a_record_without_a_report_second_half() {
    no_loss_without_a_report(0, PHYSICAL * 4..PHYSICAL * 8, true);
}

#[test]
fn no_damage_to_a_log_with_commits_after_current_loses_a_record_without_a_report_first_half() {
    no_loss_without_a_report(4, 0..PHYSICAL * 4, false);
}

#[test]
fn no_damage_to_a_log_with_commits_after_current_loses_a_record_without_a_report_second_half() {
    no_loss_without_a_report(4, PHYSICAL * 4..PHYSICAL * 8, true);
}

/// Truncations anywhere in the log (seeded, 200 of them), and its last one, two and three
/// pages zeroed, of a log whose `Current` is near its end (a large snapshot, four commits
/// after it) and of one whose `Current` is near its start (an empty snapshot, sixty commits
/// after it).
#[test]
fn no_truncation_or_zeroed_end_of_the_log_loses_a_record_without_a_report() {
    for (groups, after) in [(30, 4), (0, 60)] {
        no_loss_without_a_report_from(groups, after, |pristine| {
            let mut damages = Vec::new();
            let mut state = 0x2545_f491_4f6c_dd1du64;
            for _ in 0..200 {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let len = 1 + (state % (pristine.len() as u64 - 1)) as usize;
                damages.push((format!("cut to {len} bytes"), pristine[..len].to_vec()));
            }
            for pages in 1..=3 {
                let mut zeroed = pristine.to_vec();
                zeroed[pristine.len() - pages * PHYSICAL..].fill(0);
                damages.push((format!("the last {pages} pages zeroed"), zeroed));
            }
            damages
        });
    }
}

/// A flipped bit in a page in the middle of the log, a page that a sync once closed partial
/// (its trailer still holds that older slot beside the full one) with many synced commits
/// after it: damage, not a tear (every page after it was written and synced long after the
/// page was full). It must be refused as damage (for `--repair`, which keeps the records on
/// both sides of it), not cut as "a synced partial page with pages a lost machine wrote out
/// of order" with every acknowledged commit after it taken out of the store.
#[test]
fn a_flipped_bit_in_a_full_page_mid_log_is_not_cut_as_an_out_of_order_tail() {
    let config = Config::new();
    let directory = config.storage_directory().clone();
    let inside = directory.clone();
    Runner::new(config).start(move |context| async move {
        let directory = inside;
        let acknowledged = build(&context, &cache(), 2, 200).await;
        let pristine = std::fs::read(log_path(&directory, 2)).unwrap();
        let pages = pristine.len() / PHYSICAL;
        assert!(pages > 6, "{pages} pages");
        let page_size = NonZeroU16::new(PAGE).unwrap();
        // The first page past the middle whose last data byte, flipped, leaves an older
        // partial slot that validates.
        let (page, damaged) = (pages / 2..pages - 2)
            .find_map(|page| {
                let mut damaged = pristine.clone();
                damaged[page * PHYSICAL + PAGE as usize - 1] ^= 1;
                let physical = &damaged[page * PHYSICAL..(page + 1) * PHYSICAL];
                match runtime::buffer::paged::verified_len(page_size, page as u64, physical) {
                    Some(len) if len < PAGE as usize => Some((page, damaged)),
                    _ => None,
                }
            })
            .expect("a page once closed partial");
        install(&directory, &damaged);
        match recovery::open(&context, &cache(), TornTail::SetAside).await {
            Err(StartError::Damaged { .. }) => {}
            Err(error) => panic!("page {page} of {pages}: {error}"),
            Ok(opened) => {
                let lost = acknowledged
                    .entries()
                    .filter(|(key, _)| opened.data.get(key).is_none())
                    .count();
                panic!(
                    "a bit flipped in page {page} of {pages}: the store started without {lost} \
                     acknowledged keys (of {}); report: {:?}",
                    acknowledged.len(),
                    opened.report.lines()
                );
            }
        }
    });
}

/// `open` now falls back from a damaged interrupted rewrite (generation 2) to its
/// predecessor even when what survived of it says `Current`, and leaves it in place; but
/// `repair` still repairs "the newest generation whose salvage finds `Current`". So once the
/// store has acknowledged writes to generation 1 after the fallback, a later damage of
/// generation 1 (a lost machine writing a commit's pages out of order, as seed 384 of the
/// crash test shows) is reported as generation 2's damage, and `--repair` rebuilds the store
/// from generation 2: every write acknowledged since the fallback is gone (and the next start
/// removes generation 1).
#[test]
fn after_a_fallback_damage_to_the_predecessor_is_reported_as_its_own() {
    let config = Config::new();
    let directory = config.storage_directory().clone();
    let inside = directory.clone();
    Runner::new(config).start(move |context| async move {
        let directory = inside;
        let cache = cache();
        // Generation 1, the store.
        let opened = recovery::open(&context, &cache, TornTail::SetAside)
            .await
            .unwrap();
        assert_eq!(opened.generation, 1);
        let mut data = Data::default();
        let mut writer = opened.writer;
        for group in 0..20 {
            let mut bytes = Vec::new();
            for index in 0..10 {
                let record = set(group, index);
                record.encode(&mut bytes);
                data.apply(record);
            }
            writer = writer.append(&bytes).await.unwrap().0.sync().await.unwrap();
        }
        drop(writer);
        // A rewrite into generation 2 whose first commit (with `Current`) a lost machine left
        // with its first page lost and its `Current` kept; generation 1 still exists.
        let rewrite = recovery::write_generation(&context, &cache, 2, &data.snapshot())
            .await
            .unwrap();
        drop(
            rewrite
                .append(&Record::Current.bytes())
                .await
                .unwrap()
                .0
                .sync()
                .await
                .unwrap(),
        );
        let mut log2 = std::fs::read(log_path(&directory, 2)).unwrap();
        assert!(log2.len() > 2 * PHYSICAL);
        log2[..PAGE as usize].fill(0);
        std::fs::write(log_path(&directory, 2), &log2).unwrap();
        // The start falls back to generation 1 and acknowledges more writes there.
        let opened = recovery::open(&context, &cache, TornTail::SetAside)
            .await
            .unwrap();
        assert_eq!(opened.generation, 1, "the fallback");
        let mut writer = opened.writer;
        let mut after = Vec::new();
        for group in 100..110 {
            let mut bytes = Vec::new();
            for index in 0..10 {
                let record = set(group, index);
                if let Record::Set { key, .. } = &record {
                    after.push(key.clone());
                }
                record.encode(&mut bytes);
                data.apply(record);
            }
            writer = writer.append(&bytes).await.unwrap().0.sync().await.unwrap();
        }
        // A last commit of several pages, one of them lost before kept ones (a lost machine
        // wrote them out of order): generation 1 is now damaged past the acknowledged writes.
        let start = writer.size();
        let mut bytes = Vec::new();
        for index in 0..120 {
            set(200, index).encode(&mut bytes);
        }
        let writer = writer.append(&bytes).await.unwrap().0.sync().await.unwrap();
        assert!(writer.size() - start > 3 * u64::from(PAGE));
        drop(writer);
        let lost_page = (start / u64::from(PAGE) + 1) as usize;
        let mut log1 = std::fs::read(log_path(&directory, 1)).unwrap();
        log1[lost_page * PHYSICAL..(lost_page + 1) * PHYSICAL].fill(0);
        std::fs::write(log_path(&directory, 1), &log1).unwrap();
        match recovery::open(&context, &cache, TornTail::SetAside).await {
            Err(StartError::Damaged { file, .. }) => {
                assert!(
                    file.contains("log.1"),
                    "the damage reported is generation 2's: {file}"
                )
            }
            Err(error) => panic!("{error}"),
            Ok(_) => panic!("a page lost before kept ones is damage"),
        }
    });
    let _ = directory;
}

/// The same shape, through `--repair`: the writes acknowledged to generation 1 after the
/// fallback must survive it.
#[test]
fn repair_after_a_fallback_rebuilds_from_the_generation_that_served() {
    let config = Config::new();
    let directory = config.storage_directory().clone();
    let inside = directory.clone();
    Runner::new(config).start(move |context| async move {
        let directory = inside;
        let cache = cache();
        let opened = recovery::open(&context, &cache, TornTail::SetAside)
            .await
            .unwrap();
        let mut data = Data::default();
        let mut writer = opened.writer;
        for group in 0..20 {
            let mut bytes = Vec::new();
            for index in 0..10 {
                let record = set(group, index);
                record.encode(&mut bytes);
                data.apply(record);
            }
            writer = writer.append(&bytes).await.unwrap().0.sync().await.unwrap();
        }
        drop(writer);
        let rewrite = recovery::write_generation(&context, &cache, 2, &data.snapshot())
            .await
            .unwrap();
        drop(
            rewrite
                .append(&Record::Current.bytes())
                .await
                .unwrap()
                .0
                .sync()
                .await
                .unwrap(),
        );
        let mut log2 = std::fs::read(log_path(&directory, 2)).unwrap();
        log2[..PAGE as usize].fill(0);
        std::fs::write(log_path(&directory, 2), &log2).unwrap();
        let opened = recovery::open(&context, &cache, TornTail::SetAside)
            .await
            .unwrap();
        assert_eq!(opened.generation, 1, "the fallback");
        let mut writer = opened.writer;
        let mut after = Vec::new();
        for group in 100..110 {
            let mut bytes = Vec::new();
            for index in 0..10 {
                let record = set(group, index);
                if let Record::Set { key, .. } = &record {
                    after.push(key.clone());
                }
                record.encode(&mut bytes);
            }
            writer = writer.append(&bytes).await.unwrap().0.sync().await.unwrap();
        }
        let start = writer.size();
        let mut bytes = Vec::new();
        for index in 0..120 {
            set(200, index).encode(&mut bytes);
        }
        let writer = writer.append(&bytes).await.unwrap().0.sync().await.unwrap();
        drop(writer);
        let lost_page = (start / u64::from(PAGE) + 1) as usize;
        let mut log1 = std::fs::read(log_path(&directory, 1)).unwrap();
        log1[lost_page * PHYSICAL..(lost_page + 1) * PHYSICAL].fill(0);
        std::fs::write(log_path(&directory, 1), &log1).unwrap();
        recovery::repair(&context, &cache)
            .await
            .unwrap()
            .expect("a damaged store is repaired");
        let opened = recovery::open(&context, &cache, TornTail::SetAside)
            .await
            .unwrap();
        let missing = after
            .iter()
            .filter(|key| opened.data.get(key).is_none())
            .count();
        assert_eq!(
            missing,
            0,
            "{missing} of {} writes acknowledged to generation 1 after the fallback lost by \
             --repair (rebuilt from generation {})",
            after.len(),
            opened.generation
        );
    });
}
