//! The one place this crate draws randomness: every salt, file key, IV and recovery key comes from [`fill`], which is the operating system's CSPRNG (§11.2 rules 3 and 5).
//!
//! This crate's own unit tests (`cfg(test)`, never a normal build) can put another source in for
//! the calling thread (`hook::with`), so they can check that every IV and salt written is
//! exactly one fresh draw, not a counter or a value derived from an earlier one.

/// Fills `buf` with fresh random bytes.
///
/// # Panics
/// Panics if the operating system has no working random source: no salt, key or IV may be made
/// then, and there is no safe fallback.
pub(crate) fn fill(buf: &mut [u8]) {
    #[cfg(test)]
    if hook::fill(buf) {
        return;
    }
    getrandom::fill(buf).expect("the operating system random source failed");
}

#[cfg(test)]
pub(crate) mod hook {
    use std::cell::RefCell;

    /// A replacement source for the calling thread.
    pub(crate) type Source = Box<dyn FnMut(&mut [u8])>;

    thread_local! {
        static SOURCE: RefCell<Option<Source>> = const { RefCell::new(None) };
    }

    /// Fills `buf` from this thread's replacement source and returns true, or returns false when
    /// there is none.
    pub(crate) fn fill(buf: &mut [u8]) -> bool {
        SOURCE.with(|source| match source.borrow_mut().as_mut() {
            Some(source) => {
                source(buf);
                true
            }
            None => false,
        })
    }

    /// Runs `f` with `source` as this thread's random source, and puts the previous one back.
    pub(crate) fn with<T>(source: Source, f: impl FnOnce() -> T) -> T {
        struct Restore(Option<Source>);
        impl Drop for Restore {
            fn drop(&mut self) {
                let previous = self.0.take();
                SOURCE.with(|source| *source.borrow_mut() = previous);
            }
        }
        let previous = SOURCE.with(|slot| slot.borrow_mut().replace(source));
        let _restore = Restore(previous);
        f()
    }
}
