//! Counts, in test builds, the file reads and writes a queue makes, per thread: tests run the
//! queue task on a current-thread runtime and check that none of its disk I/O ran on that
//! thread (it belongs on the blocking pool). In other builds [`note_io`] is empty.

#[cfg(test)]
thread_local! {
    static IO: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Notes one read or write of a queue's files (the message log, the paged index).
#[inline]
pub(crate) fn note_io() {
    #[cfg(test)]
    IO.with(|count| count.set(count.get() + 1));
}

/// Reads and writes noted on the calling thread so far.
#[cfg(test)]
pub(crate) fn io_on_this_thread() -> u64 {
    IO.with(std::cell::Cell::get)
}

#[cfg(test)]
mod tests {
    #[test]
    fn io_is_counted_per_thread() {
        let before = super::io_on_this_thread();
        super::note_io();
        std::thread::spawn(super::note_io).join().unwrap_or_default();
        assert_eq!(super::io_on_this_thread(), before + 1, "the other thread's I/O is its own");
    }
}
