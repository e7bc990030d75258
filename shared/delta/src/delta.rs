//! A delta: a layout with its literal and patched pages' data (a push body, or a pull answer),
//! built, encoded, parsed and applied.

use super::*;

/// A layout with its literal and patched pages' data: a push body, or a pull answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delta {
    /// How the image is built.
    pub layout: Layout,
    /// In target order, each literal page's id and bytes, each patched page's id, entry
    /// count (u16) and entries (offset u16, length u16, bytes; sorted and disjoint), and each
    /// compressed page's id, references and frame (`compressed.rs`).
    pub literals: Vec<u8>,
}

/// One target page as a delta makes it.
enum Piece<'a> {
    Copy(u32),
    Literal {
        id: &'a [u8],
        page: &'a [u8],
    },
    Patch {
        from: u32,
        id: &'a [u8],
        entries: &'a [u8],
    },
    Compressed {
        id: &'a [u8],
        /// Source pages, u32 each, checked to be within the source.
        references: &'a [u8],
        frame: &'a [u8],
    },
}

impl Delta {
    /// How many leading bytes of an encoded delta [`Delta::geometry`] reads.
    pub const GEOMETRY_PREFIX: usize = 4 + 4 + 8;

    /// The geometry of the image an encoded delta builds, read from its first
    /// [`Delta::GEOMETRY_PREFIX`] bytes and checked against `limits`: what a receiver needs to
    /// know what the image will hold before it takes the rest. [`Delta::parse`] checks it again.
    pub fn geometry(prefix: &[u8], limits: &Limits) -> Result<Geometry, DeltaError> {
        let (page_size, length) = delta_prefix(&mut Reader::new(prefix))?;
        Geometry::new(length, page_size, limits)
    }

    /// Fills `layout`'s pages from `image` (the target itself) and, where known, the source.
    ///
    /// A patched page carries the bytes that differ from its source page when the source is
    /// known, else all of its fields (`shape.rs`). A patch that would take as many bytes as its
    /// page is sent as the page.
    ///
    /// A known source is the origin's copy of a revision that the client holds as its own
    /// re-export: the same pages, except a database header of its own (change counter, the
    /// SQLite version that wrote it) and the pages the export itself rewrites. So with the source
    /// known, page 1 always carries its header (patched, never copied as is), and only pages the
    /// plan matched are patched: a literal page is never patched against the page at its place,
    /// which may be one the client's export wrote differently.
    pub fn build(layout: Layout, image: &[u8], source: Option<&[u8]>) -> Self {
        Self::make(layout, image, source, None)
    }

    /// [`Delta::build`] by a sender that holds exactly the receiver's source bytes: a page the
    /// layout sends literally is compressed against the source's pages where the edit happened
    /// where that clearly pays (`compressed.rs`). The receiver must rebuild compressed pages
    /// (any origin of this release does; a pull asks for them).
    pub fn build_compressed(layout: Layout, image: &[u8], source: &[u8]) -> Self {
        Self::make(layout, image, Some(source), Some((source, None)))
    }

    /// [`Delta::build`] without the source's bytes (patches from shapes alone), by a sender that
    /// holds the receiver's source pages where `held` says so, in `source` at their places: a
    /// pull by a file sparse against a revision, whose pages with the revision's ids are the
    /// revision's. A literal page is compressed against held pages only.
    pub fn build_compressed_held(
        layout: Layout,
        image: &[u8],
        source: &[u8],
        held: &[bool],
    ) -> Self {
        Self::make(layout, image, None, Some((source, Some(held))))
    }

    /// Builds with `source` for patches, and `compress` (the source's bytes, and which of its
    /// pages the receiver holds, all where `None`) for compressed pages.
    fn make(
        layout: Layout,
        image: &[u8],
        source: Option<&[u8]>,
        compress: Option<(&[u8], Option<&[bool]>)>,
    ) -> Self {
        let geometry = layout.geometry;
        let changed: Vec<u32> = layout.literal_pages().collect();
        let mut compressor = compress.and_then(|(bytes, held)| {
            let pages = source_pages(bytes.len() as u64, geometry.page_size);
            let held = move |page: u32| {
                page < layout.source_pages
                    && page < pages
                    && held.is_none_or(|held| held.get(page as usize) == Some(&true))
            };
            Some((compressed::Compressor::new()?, bytes, held))
        });
        let format = shape::Format::of(image, geometry.page_size);
        let source_page = |from: u32| {
            source.map(|bytes| {
                let source = Geometry {
                    length: bytes.len() as u64,
                    page_size: geometry.page_size,
                };
                &bytes[source.page_range(from)]
            })
        };
        let mut runs = Runs::default();
        let mut literals = Vec::new();
        for (to, make) in layout.pages() {
            let page = &image[geometry.page_range(to)];
            let header = to == 0 && source.is_some();
            let candidate = match make {
                Make::Copy(from) if header => Some(from),
                Make::Copy(_) | Make::Literal | Make::Compressed => None,
                Make::Patch(from) => Some(from),
            };
            let entries = candidate.and_then(|from| {
                let entries = match source_page(from) {
                    Some(theirs) if theirs.len() == page.len() && header => {
                        with_header(differences(theirs, page), page.len())
                    }
                    Some(theirs) if theirs.len() == page.len() => differences(theirs, page),
                    Some(_) => return None,
                    None => Some(shape::fields(format, to, page)).filter(|f| !f.is_empty())?,
                };
                (patch_len(&entries) < page.len()).then_some((from, entries))
            });
            let make = match (make, entries) {
                (Make::Copy(from), _) if !header => Make::Copy(from),
                (_, Some((from, entries))) => {
                    literals.extend_from_slice(&PageId::of(page).0);
                    literals.extend_from_slice(&(entries.len() as u16).to_le_bytes());
                    for entry in entries {
                        literals.extend_from_slice(&(entry.start as u16).to_le_bytes());
                        literals.extend_from_slice(&(entry.len() as u16).to_le_bytes());
                        literals.extend_from_slice(&page[entry]);
                    }
                    Make::Patch(from)
                }
                (_, None) => {
                    literals.extend_from_slice(&PageId::of(page).0);
                    let framed = compressor.as_mut().and_then(|(compressor, source, held)| {
                        let references =
                            compressed::references(to, &changed, geometry.page_size, *held);
                        let source = Geometry {
                            length: source.len() as u64,
                            page_size: geometry.page_size,
                        }
                        .pages_of(source);
                        let frame = compressor.frame(page, &references, source)?;
                        Some((references, frame))
                    });
                    match framed {
                        Some((references, frame)) => {
                            literals.push(references.len() as u8);
                            for r in references {
                                literals.extend_from_slice(&r.to_le_bytes());
                            }
                            literals.extend_from_slice(&(frame.len() as u32).to_le_bytes());
                            literals.extend_from_slice(&frame);
                            Make::Compressed
                        }
                        None => {
                            literals.extend_from_slice(page);
                            Make::Literal
                        }
                    }
                }
            };
            runs.push(to, make);
        }
        Self {
            layout: Layout {
                runs: runs.0,
                ..layout
            },
            literals,
        }
    }

    /// The wire form: the layout, then the literal and patched pages.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.layout.encode();
        out.extend_from_slice(&self.literals);
        out
    }

    /// Parses a delta against a source of `source_len` bytes: its layout strictly, and then
    /// exactly the literal and patched pages it names, each patch's entries in order, within
    /// its page and smaller than it.
    pub fn parse(bytes: &[u8], limits: &Limits, source_len: u64) -> Result<Self, DeltaError> {
        let (layout, rest) = Layout::parse(bytes, limits, source_len)?;
        let delta = Self {
            layout,
            literals: rest.to_vec(),
        };
        delta.pieces(|_, _| Ok(()))?;
        Ok(delta)
    }

    /// Walks the target's pages in order with how each is made, reading the literal and
    /// patched pages' data strictly.
    fn pieces(
        &self,
        mut each: impl FnMut(u32, Piece<'_>) -> Result<(), DeltaError>,
    ) -> Result<(), DeltaError> {
        const MISMATCH: DeltaError = DeltaError::Malformed {
            what: "literal pages that are not exactly what the layout names",
        };
        let geometry = self.layout.geometry;
        let mut r = Reader::new(&self.literals);
        for (to, make) in self.layout.pages() {
            let len = geometry.page_len(to);
            let piece = match make {
                Make::Copy(from) => Piece::Copy(from),
                Make::Literal => Piece::Literal {
                    id: r.take(ID_LEN).map_err(|_| MISMATCH)?,
                    page: r.take(len).map_err(|_| MISMATCH)?,
                },
                Make::Patch(from) => {
                    let id = r.take(ID_LEN).map_err(|_| MISMATCH)?;
                    let count = r.u16().map_err(|_| MISMATCH)?;
                    let start = r.rest();
                    let mut end = 0;
                    for _ in 0..count {
                        let offset = usize::from(r.u16().map_err(|_| MISMATCH)?);
                        let n = usize::from(r.u16().map_err(|_| MISMATCH)?);
                        r.take(n).map_err(|_| MISMATCH)?;
                        if n == 0 || offset < end {
                            return Err(DeltaError::Malformed {
                                what: "patch entries that are empty, overlap or are out of order",
                            });
                        }
                        end = offset + n;
                        if end > len {
                            return Err(DeltaError::Malformed {
                                what: "a patch entry past its page's end",
                            });
                        }
                    }
                    let entries = &start[..start.len() - r.rest().len()];
                    if PATCH_HEADER + entries.len() >= len {
                        return Err(DeltaError::Malformed {
                            what: "a patch no smaller than its page",
                        });
                    }
                    Piece::Patch { from, id, entries }
                }
                Make::Compressed => {
                    let id = r.take(ID_LEN).map_err(|_| MISMATCH)?;
                    let n = usize::from(r.u8().map_err(|_| MISMATCH)?);
                    if n == 0 || n > compressed::MAX_REFERENCES {
                        return Err(DeltaError::Malformed {
                            what: "a compressed page naming no source page, or too many",
                        });
                    }
                    let references = r.take(4 * n).map_err(|_| MISMATCH)?;
                    for reference in references.chunks_exact(4) {
                        let page = u32::from_le_bytes(reference.try_into().expect("4 bytes"));
                        if page >= self.layout.source_pages {
                            return Err(DeltaError::OutOfRange {
                                page,
                                pages: self.layout.source_pages,
                                what: "source",
                            });
                        }
                    }
                    let frame_len = r.u32().map_err(|_| MISMATCH)? as usize;
                    let frame = r.take(frame_len).map_err(|_| MISMATCH)?;
                    if compressed::compressed_len(n, frame_len) >= len {
                        return Err(DeltaError::Malformed {
                            what: "a compressed page no smaller than its page",
                        });
                    }
                    Piece::Compressed {
                        id,
                        references,
                        frame,
                    }
                }
            };
            each(to, piece)?;
        }
        if !r.rest().is_empty() {
            return Err(MISMATCH);
        }
        Ok(())
    }

    /// Builds the image from `source` (cut into the layout's page size), checking every literal
    /// and patched page against its id, every copied page's length, and the whole image
    /// against the layout's SHA-256. Nothing is returned unless every check passes.
    pub fn assemble(&self, source: &[u8]) -> Result<Vec<u8>, DeltaError> {
        self.assemble_into(source, Vec::new())
    }

    /// [`Delta::assemble`] into `buffer`, emptied first: a caller that assembles image after
    /// image hands back a buffer whose memory is already mapped, which spares a page fault for
    /// every 4 KiB a fresh allocation of a large image would take as it is written.
    pub fn assemble_into(&self, source: &[u8], buffer: Vec<u8>) -> Result<Vec<u8>, DeltaError> {
        let layout = &self.layout;
        let geometry = layout.geometry;
        let source_geometry = Geometry {
            length: source.len() as u64,
            page_size: geometry.page_size,
        };
        let source_pages = source_pages(source.len() as u64, geometry.page_size);
        if source_pages != layout.source_pages {
            return Err(DeltaError::SourceMismatch {
                claimed: layout.source_pages,
                actual: source_pages,
            });
        }
        let mut image = buffer;
        image.clear();
        image.reserve_exact(geometry.length as usize);
        let mut decompressor = None;
        let copy = |image: &mut Vec<u8>, from: u32, to: u32| {
            let page = &source[source_geometry.page_range(from)];
            if page.len() != geometry.page_len(to) {
                // Only a source's short last page can differ, and only the target's last page
                // may be short.
                return Err(DeltaError::OutOfRange {
                    page: from,
                    pages: source_pages,
                    what: "source (a short page)",
                });
            }
            image.extend_from_slice(page);
            Ok(())
        };
        self.pieces(|to, piece| {
            let (id, start) = match piece {
                Piece::Copy(from) => return copy(&mut image, from, to),
                Piece::Literal { id, page } => {
                    let start = image.len();
                    image.extend_from_slice(page);
                    (id, start)
                }
                Piece::Patch { from, id, entries } => {
                    let start = image.len();
                    copy(&mut image, from, to)?;
                    let mut r = Reader::new(entries);
                    while !r.rest().is_empty() {
                        let offset = start + usize::from(r.u16()?);
                        let n = usize::from(r.u16()?);
                        image[offset..offset + n].copy_from_slice(r.take(n)?);
                    }
                    (id, start)
                }
                Piece::Compressed {
                    id,
                    references,
                    frame,
                } => {
                    let decompressor = match &mut decompressor {
                        Some(d) => d,
                        None => decompressor.insert(compressed::Decompressor::new()?),
                    };
                    let pages = source_geometry.pages_of(source);
                    let references = references
                        .chunks_exact(4)
                        .map(|r| pages(u32::from_le_bytes(r.try_into().expect("4 bytes"))));
                    let page = decompressor.page(frame, references, geometry.page_len(to))?;
                    let start = image.len();
                    image.extend_from_slice(&page);
                    (id, start)
                }
            };
            if PageId::of(&image[start..]).0 != id {
                return Err(DeltaError::PageMismatch { page: to });
            }
            Ok(())
        })?;
        if sha256(&image) != layout.digest {
            return Err(DeltaError::DigestMismatch);
        }
        Ok(image)
    }
}

/// An encoded delta's magic, page size and image length, in that order: the
/// [`Delta::GEOMETRY_PREFIX`] every delta starts with, unchecked but for the magic.
pub(crate) fn delta_prefix(r: &mut Reader<'_>) -> Result<(u32, u64), DeltaError> {
    if r.take(4)? != DELTA_MAGIC {
        return Err(DeltaError::Malformed {
            what: "not a delta (magic)",
        });
    }
    Ok((r.u32()?, r.u64()?))
}

/// The byte ranges where `new` differs from `old` (of equal length), ranges closer than an
/// entry's header merged.
fn differences(old: &[u8], new: &[u8]) -> Vec<std::ops::Range<usize>> {
    let mut out: Vec<std::ops::Range<usize>> = Vec::new();
    for (i, _) in old.iter().zip(new).enumerate().filter(|(_, (a, b))| a != b) {
        match out.last_mut() {
            Some(last) if i <= last.end + ENTRY_HEADER => last.end = i + 1,
            _ => out.push(i..i + 1),
        }
    }
    out
}

/// `entries` (sorted, disjoint) with page 1's database header covered too.
fn with_header(
    entries: Vec<std::ops::Range<usize>>,
    page_len: usize,
) -> Vec<std::ops::Range<usize>> {
    let header = 0..shape::DB_HEADER.min(page_len);
    let mut out = vec![header];
    for entry in entries {
        let last = out.last_mut().expect("the header");
        if entry.start <= last.end {
            last.end = last.end.max(entry.end);
        } else {
            out.push(entry);
        }
    }
    out
}

/// The bytes a patch of `entries` takes after its page's id.
fn patch_len(entries: &[std::ops::Range<usize>]) -> usize {
    PATCH_HEADER
        + entries
            .iter()
            .map(|e| ENTRY_HEADER + e.len())
            .sum::<usize>()
}
