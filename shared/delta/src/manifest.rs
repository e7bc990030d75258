//! A manifest: an image named page by page (what a client sends to push or to pull), its
//! encoding, and the hashing of an image's pages.

use super::*;

/// An image named page by page: what a client sends to push or to pull.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    /// The image's length and page size.
    pub geometry: Geometry,
    /// The SHA-256 of the whole image.
    pub digest: [u8; 32],
    /// One id per page, in order.
    pub ids: Vec<PageId>,
    /// One shape per page, in order, when known (`shape.rs`); a manifest that has them asks for
    /// patched pages in what is planned against it.
    pub shapes: Option<Vec<PageId>>,
}

impl Manifest {
    /// Names `image`, cut into pages of `page_size`, by page ids alone.
    pub fn of(image: &[u8], page_size: u32) -> Result<Self, DeltaError> {
        Self::describe(image, page_size, false)
    }

    /// Names `image` by page ids and shapes.
    pub fn with_shapes(image: &[u8], page_size: u32) -> Result<Self, DeltaError> {
        Self::describe(image, page_size, true)
    }

    /// [`Manifest::with_shapes`] when `shapes`, else [`Manifest::of`].
    pub fn describe(image: &[u8], page_size: u32, shapes: bool) -> Result<Self, DeltaError> {
        let limits = Limits {
            max_length: image.len() as u64,
        };
        let geometry = Geometry::new(image.len() as u64, page_size, &limits)?;
        let format = shapes.then(|| shape::Format::of(image, page_size));
        // The whole image's hash and the pages' are independent passes of about the same size
        // (a page's shape hashes it again only where it names other pages): run side by side.
        let (digest, (ids, shapes)) = if image.len() < PARALLEL_FROM {
            (sha256(image), hash_pages(image, page_size, format))
        } else {
            std::thread::scope(|scope| {
                let digest = scope.spawn(|| sha256(image));
                let pages = hash_pages(image, page_size, format);
                (digest.join().expect("hashing does not panic"), pages)
            })
        };
        Ok(Self {
            geometry,
            digest,
            ids,
            shapes,
        })
    }

    /// This manifest as a source to plan against (its own image's bytes not known).
    pub fn source(&self) -> Source<'_> {
        Source {
            ids: &self.ids,
            shapes: self.shapes.as_deref(),
            bytes: None,
        }
    }

    /// The wire form: the first format without shapes, the second with them.
    pub fn encode(&self) -> Vec<u8> {
        let shapes = self.shapes.as_deref().unwrap_or_default();
        let mut out =
            Vec::with_capacity(MANIFEST_HEADER + (self.ids.len() + shapes.len()) * ID_LEN);
        out.extend_from_slice(match self.shapes {
            Some(_) => SHAPED_MANIFEST_MAGIC,
            None => MANIFEST_MAGIC,
        });
        out.extend_from_slice(&self.geometry.page_size.to_le_bytes());
        out.extend_from_slice(&self.geometry.length.to_le_bytes());
        out.extend_from_slice(&self.digest);
        for id in self.ids.iter().chain(shapes) {
            out.extend_from_slice(&id.0);
        }
        out
    }

    /// Parses either wire form strictly: exactly one id (and, in the second, one shape) per
    /// page, nothing after the last.
    pub fn parse(bytes: &[u8], limits: &Limits) -> Result<Self, DeltaError> {
        let mut r = Reader::new(bytes);
        let shaped = match r.take(4)? {
            magic if magic == MANIFEST_MAGIC => false,
            magic if magic == SHAPED_MANIFEST_MAGIC => true,
            _ => {
                return Err(DeltaError::Malformed {
                    what: "not a delta manifest (magic)",
                });
            }
        };
        let page_size = r.u32()?;
        let length = r.u64()?;
        let digest = r.array::<32>()?;
        let geometry = Geometry::new(length, page_size, limits)?;
        let pages = geometry.pages() as usize;
        let per_page = if shaped { 2 * ID_LEN } else { ID_LEN };
        if r.rest().len() != pages * per_page {
            return Err(DeltaError::Malformed {
                what: "a manifest whose id count is not its page count",
            });
        }
        let mut ids = r.rest().chunks_exact(ID_LEN).map(|c| {
            let mut id = [0; ID_LEN];
            id.copy_from_slice(c);
            PageId(id)
        });
        let page_ids = ids.by_ref().take(pages).collect();
        Ok(Self {
            geometry,
            digest,
            ids: page_ids,
            shapes: shaped.then(|| ids.collect()),
        })
    }
}

/// Every page's id, `image` cut into pages of `page_size`.
pub fn page_ids(image: &[u8], page_size: u32) -> Vec<PageId> {
    hash_pages(image, page_size, None).0
}

/// Below this, hashing on one thread costs less than starting others.
pub(crate) const PARALLEL_FROM: usize = 4 << 20;

/// Every page's id and, given the image's format, its shape: the pages split into one
/// contiguous share per available thread when the image is large.
fn hash_pages(
    image: &[u8],
    page_size: u32,
    format: Option<shape::Format>,
) -> (Vec<PageId>, Option<Vec<PageId>>) {
    let page_size = page_size as usize;
    let hash = |first: usize, share: &[u8]| {
        let ids: Vec<PageId> = share.chunks(page_size).map(PageId::of).collect();
        let shapes = format.map(|format| {
            share
                .chunks(page_size)
                .zip(&ids)
                .enumerate()
                .map(|(i, (page, id))| shape::shape(format, (first + i) as u32, page, *id))
                .collect::<Vec<_>>()
        });
        (ids, shapes)
    };
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    if image.len() < PARALLEL_FROM || threads == 1 {
        return hash(0, image);
    }
    let pages_per_share = image.len().div_ceil(page_size).div_ceil(threads);
    let shares: Vec<(Vec<PageId>, Option<Vec<PageId>>)> = std::thread::scope(|scope| {
        let running: Vec<_> = image
            .chunks(pages_per_share * page_size)
            .enumerate()
            .map(|(n, share)| scope.spawn(move || hash(n * pages_per_share, share)))
            .collect();
        running
            .into_iter()
            .map(|share| share.join().expect("hashing does not panic"))
            .collect()
    });
    let mut ids = Vec::with_capacity(image.len().div_ceil(page_size));
    let mut shapes = format.map(|_| Vec::with_capacity(ids.capacity()));
    for (share_ids, share_shapes) in shares {
        ids.extend(share_ids);
        if let (Some(shapes), Some(share)) = (shapes.as_mut(), share_shapes) {
            shapes.extend(share);
        }
    }
    (ids, shapes)
}
