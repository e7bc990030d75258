//! The integrity driver's judgements, over a store made of maps.

use std::collections::HashMap;

use expect_test::{Expect, expect};

use super::*;

/// A store as plain data: which images are retained, their records, and the chunk bytes.
#[derive(Default)]
struct Fake {
    dangling: Vec<UserId>,
    unfinished: Vec<(String, u64)>,
    retained: Vec<Digest>,
    records: HashMap<Digest, (u64, Vec<Digest>, bool)>,
    chunks: HashMap<Digest, Bytes>,
}

impl Inspect for Fake {
    type Layout = ();

    async fn dangling_pointers(&self) -> Result<Vec<UserId>, StorageError> {
        Ok(self.dangling.clone())
    }

    async fn retained_images(&self) -> Result<Vec<Digest>, StorageError> {
        Ok(self.retained.clone())
    }

    async fn unfinished_wipes(&self) -> Result<Vec<(String, u64)>, StorageError> {
        Ok(self.unfinished.clone())
    }

    async fn image(&self, digest: &Digest) -> Result<Record<()>, StorageError> {
        Ok(match self.records.get(digest) {
            None => Record::Missing,
            Some((_, _, false)) => Record::Malformed,
            Some((size, manifest, true)) => Record::Image(Image {
                size: *size,
                manifest: manifest.clone(),
                layout: (),
            }),
        })
    }

    async fn read(
        &self,
        image: &Image<()>,
        run: Range<usize>,
    ) -> Result<Vec<Stored>, StorageError> {
        Ok(image.manifest[run]
            .iter()
            .map(|c| {
                self.chunks
                    .get(c)
                    .map_or(Stored::Missing, |b| Stored::Bytes(b.clone()))
            })
            .collect())
    }
}

/// Chunks of 4 bytes: `"aaaa"` and so on, named by a letter in the expectations.
fn chunk(c: char) -> (Digest, Bytes) {
    let bytes = Bytes::from(c.to_string().repeat(4));
    (Digest::of(&bytes), bytes)
}

/// A store holding images spelled as strings of chunk letters, all retained; `tweak` damages it.
fn store(images: &[&str], tweak: impl FnOnce(&mut Fake, &[Digest])) -> Fake {
    let mut fake = Fake::default();
    let mut digests = Vec::new();
    for spelled in images {
        let chunks: Vec<(Digest, Bytes)> = spelled.chars().map(chunk).collect();
        let whole: Vec<u8> = chunks.iter().flat_map(|(_, b)| b.to_vec()).collect();
        let digest = Digest::of(&whole);
        fake.records.insert(
            digest,
            (
                whole.len() as u64,
                chunks.iter().map(|(d, _)| *d).collect(),
                true,
            ),
        );
        fake.chunks.extend(chunks);
        fake.retained.push(digest);
        digests.push(digest);
    }
    tweak(&mut fake, &digests);
    fake
}

/// Names digests by the chunk letter or image number they stand for, so expectations read.
#[track_caller]
fn check_report(images: &[&str], tweak: impl FnOnce(&mut Fake, &[Digest]), expect: Expect) {
    let fake = store(images, tweak);
    let (progress, watched) = watch::channel(IntegrityReport::default());
    let report = futures::executor::block_on(super::check(&fake, &progress)).expect("check");
    assert_eq!(
        *watched.borrow(),
        report,
        "the watched report is the final one"
    );
    let mut names: HashMap<Digest, String> =
        ('a'..='z').map(|c| (chunk(c).0, c.to_string())).collect();
    for (i, d) in fake.retained.iter().enumerate() {
        names.insert(*d, format!("image{i}"));
    }
    let name = |d: &Digest| names.get(d).cloned().unwrap_or_else(|| "?".into());
    let problems: Vec<String> = report
        .problems
        .iter()
        .map(|p| match p {
            IntegrityProblem::DanglingPointer { user } => format!("dangling {}", user.as_str()),
            IntegrityProblem::MissingImage { image } => format!("missing image {}", name(image)),
            IntegrityProblem::MissingChunk { image, chunk } => {
                format!("missing chunk {} of {}", name(chunk), name(image))
            }
            IntegrityProblem::ChunkMismatch { chunk } => format!("mismatch {}", name(chunk)),
            IntegrityProblem::ImageMismatch { image } => format!("image mismatch {}", name(image)),
            IntegrityProblem::UnfinishedWipe { object, ranges } => {
                format!("unfinished wipe of {ranges} ranges in {object}")
            }
        })
        .collect();
    expect.assert_eq(&format!(
        "checked {} images, {} bytes\n{}",
        report.images_checked,
        report.bytes_checked,
        problems.join("\n")
    ));
}

fn damage(fake: &mut Fake, c: char) {
    fake.chunks.insert(chunk(c).0, Bytes::from_static(b"oops"));
}

#[test]
fn a_sound_store_reports_nothing() {
    check_report(
        &["abc", "abd"],
        |_, _| {},
        expect![[r#"
        checked 2 images, 24 bytes
    "#]],
    );
}

#[test]
fn a_damaged_chunk_is_reported_once_however_many_images_share_it() {
    check_report(
        &["abc", "abd", "xyz"],
        |f, _| damage(f, 'b'),
        expect![[r#"
        checked 3 images, 28 bytes
        mismatch b"#]],
    );
}

#[test]
fn a_missing_chunk_is_reported_for_each_image_that_needs_it() {
    check_report(
        &["abc", "abd"],
        |f, _| {
            f.chunks.remove(&chunk('a').0);
        },
        expect![[r#"
            checked 2 images, 16 bytes
            missing chunk a of image0
            missing chunk a of image1"#]],
    );
}

#[test]
fn sound_chunks_that_reassemble_to_another_image_are_an_image_mismatch() {
    check_report(
        &["abc"],
        |f, digests| {
            f.records.get_mut(&digests[0]).expect("record").1.reverse();
        },
        expect![[r#"
            checked 1 images, 12 bytes
            image mismatch image0"#]],
    );
    check_report(
        &["abc"],
        |f, digests| {
            f.records.get_mut(&digests[0]).expect("record").0 = 11;
        },
        expect![[r#"
            checked 1 images, 12 bytes
            image mismatch image0"#]],
    );
}

#[test]
fn records_missing_malformed_pointers_dangling_and_wipes_unfinished() {
    check_report(
        &["abc", "def"],
        |f, digests| {
            f.records.remove(&digests[0]);
            f.records.get_mut(&digests[1]).expect("record").2 = false;
            f.dangling.push(UserId::new("carol").expect("user"));
            f.unfinished.push(("ab12.pack".to_owned(), 3));
        },
        expect![[r#"
            checked 1 images, 0 bytes
            unfinished wipe of 3 ranges in ab12.pack
            dangling carol
            missing image image0
            image mismatch image1"#]],
    );
}

#[test]
fn images_longer_than_one_run_are_read_in_runs() {
    let long: String = std::iter::repeat_n("ab", RUN).collect::<String>() + "c";
    check_report(
        &[long.as_str()],
        |f, _| damage(f, 'c'),
        expect![[r#"
        checked 1 images, 2048 bytes
        mismatch c"#]],
    );
}

#[test]
fn a_report_lists_ten_thousand_problems_and_counts_the_rest() {
    let many: String = ('a'..='z').collect();
    let images: Vec<String> = (0..400).map(|i| format!("{many}{i}")).collect();
    let fake = store(
        &images.iter().map(String::as_str).collect::<Vec<_>>(),
        |f, _| {
            f.chunks.clear();
        },
    );
    let (progress, _) = watch::channel(IntegrityReport::default());
    let report = futures::executor::block_on(super::check(&fake, &progress)).expect("check");
    let missing: usize = images.iter().map(|i| i.chars().count()).sum();
    assert_eq!(report.problems.len(), MAX_PROBLEMS);
    assert_eq!(report.problems_omitted as usize, missing - MAX_PROBLEMS);
}
