//! HTTP/2 requests that never reach the proxy's service. The h2 library refuses some streams by
//! itself, with RST_STREAM and no word to hyper or to us: a malformed request head (a pseudo-header
//! missing or out of place, a connection-specific header), a stream over the concurrency limit. Such
//! a request is not forwarded, but it is a request, and each request gets one record. This module
//! counts them.
//!
//! [`client_frames`] reads the frame headers of what the client sends (after the connection preface)
//! and counts the streams it opens: a HEADERS frame on a new client stream id. The service calls
//! [`H2Streams::dispatched`] for each request it is handed. When the connection ends, every opened
//! stream that was never dispatched is a request refused below us: the tunnel records that many
//! `bad_request` denials ([`H2Streams::undispatched`]). The records come when the connection ends,
//! not when the stream was reset: the library does not say when, and nothing was forwarded.
//!
//! Reading frame headers costs a few comparisons per read; payloads are skipped, never copied.

use crate::connection::io::{Observed, ReadObserver};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The client connection preface (RFC 9113 §3.4), before the first frame.
const PREFACE_LEN: usize = 24;
const FRAME_HEADER_LEN: usize = 9;
const FRAME_HEADERS: u8 = 0x1;

/// Streams the client opened and requests the service was handed, on one h2 connection.
#[derive(Debug, Default)]
pub(crate) struct H2Streams {
    opened: AtomicU64,
    dispatched: AtomicU64,
    /// Our graceful shutdown has begun: streams opened since are refused by our GOAWAY, not
    /// counted as the client's.
    stopped: AtomicBool,
}

impl H2Streams {
    pub fn new() -> Arc<H2Streams> {
        Arc::new(H2Streams::default())
    }

    /// A request was handed to the service.
    pub fn dispatched(&self) {
        self.dispatched.fetch_add(1, Ordering::Relaxed);
    }

    /// Our graceful shutdown of the connection begins: streams the client opens from now on are
    /// not counted (the GOAWAY refuses them, through no fault of the client's).
    pub fn stop_counting(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }

    /// Streams opened (before [`H2Streams::stop_counting`]) and never handed to the service.
    /// Meaningful once the connection has ended.
    pub fn undispatched(&self) -> u64 {
        let opened = self.opened.load(Ordering::Relaxed);
        opened.saturating_sub(self.dispatched.load(Ordering::Relaxed))
    }
}

/// Where the reader is in the client's byte stream.
#[derive(Debug)]
struct FrameScan {
    /// Preface bytes still to pass.
    preface_left: usize,
    header: [u8; FRAME_HEADER_LEN],
    header_have: usize,
    /// Payload bytes of the current frame still to pass.
    payload_left: usize,
    /// The highest client stream id opened so far (ids only grow, RFC 9113 §5.1.1).
    last_stream: u32,
}

impl FrameScan {
    fn new() -> FrameScan {
        FrameScan {
            preface_left: PREFACE_LEN,
            header: [0; FRAME_HEADER_LEN],
            header_have: 0,
            payload_left: 0,
            last_stream: 0,
        }
    }

    /// Passes `bytes`; returns how many streams they opened.
    fn feed(&mut self, mut bytes: &[u8]) -> u64 {
        let mut opened = 0;
        while !bytes.is_empty() {
            if self.preface_left > 0 {
                let n = self.preface_left.min(bytes.len());
                self.preface_left -= n;
                bytes = &bytes[n..];
            } else if self.payload_left > 0 {
                let n = self.payload_left.min(bytes.len());
                self.payload_left -= n;
                bytes = &bytes[n..];
            } else {
                let n = (FRAME_HEADER_LEN - self.header_have).min(bytes.len());
                self.header[self.header_have..self.header_have + n].copy_from_slice(&bytes[..n]);
                self.header_have += n;
                bytes = &bytes[n..];
                if self.header_have == FRAME_HEADER_LEN {
                    self.header_have = 0;
                    let h = &self.header;
                    self.payload_left =
                        usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
                    let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
                    // A HEADERS frame on a higher odd id opens a client stream; on a known id it
                    // carries trailers.
                    if h[3] == FRAME_HEADERS && stream % 2 == 1 && stream > self.last_stream {
                        self.last_stream = stream;
                        opened += 1;
                    }
                }
            }
        }
        opened
    }
}

/// Counts the streams a client opens into an [`H2Streams`], from the bytes it sends.
pub(crate) struct StreamCounter {
    scan: FrameScan,
    streams: Arc<H2Streams>,
}

impl ReadObserver for StreamCounter {
    fn observe(&mut self, bytes: &[u8]) {
        let opened = self.scan.feed(bytes);
        if opened > 0 && !self.streams.stopped.load(Ordering::Relaxed) {
            self.streams.opened.fetch_add(opened, Ordering::Relaxed);
        }
    }
}

/// A client stream whose frame headers are counted into an [`H2Streams`].
pub(crate) type ClientFrames<T> = Observed<T, StreamCounter>;

/// Wraps the client's stream of one h2 connection.
pub(crate) fn client_frames<T>(inner: T, streams: Arc<H2Streams>) -> ClientFrames<T> {
    Observed::new(
        inner,
        StreamCounter {
            scan: FrameScan::new(),
            streams,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

    fn frame(kind: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len() as u32;
        let mut out = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, 0];
        out.extend_from_slice(&stream.to_be_bytes());
        out.extend_from_slice(payload);
        out
    }

    fn conversation() -> Vec<u8> {
        let mut bytes = PREFACE.to_vec();
        bytes.extend(frame(0x4, 0, b"")); // SETTINGS
        bytes.extend(frame(FRAME_HEADERS, 1, b"\x83\x87\x84")); // opens 1
        bytes.extend(frame(0x0, 1, &[FRAME_HEADERS; 40])); // DATA that looks like headers
        bytes.extend(frame(FRAME_HEADERS, 1, b"\x40")); // trailers on 1
        bytes.extend(frame(FRAME_HEADERS, 3, b"\x83")); // opens 3
        bytes.extend(frame(FRAME_HEADERS, 2, b"\x83")); // even: not a client stream
        bytes.extend(frame(0x9, 3, b"\x00")); // CONTINUATION
        bytes.extend(frame(FRAME_HEADERS, 7, b"")); // opens 7 (5 skipped is allowed)
        bytes.extend(frame(FRAME_HEADERS, 5, b"")); // lower than 7: not a new stream
        bytes
    }

    #[test]
    fn counts_streams_the_client_opens_however_the_bytes_are_split() {
        let bytes = conversation();
        assert_eq!(FrameScan::new().feed(&bytes), 3);
        for chunk in [1, 2, 5, 9, 10, 23, 24, 25, 64] {
            let mut scan = FrameScan::new();
            let opened: u64 = bytes.chunks(chunk).map(|c| scan.feed(c)).sum();
            assert_eq!(opened, 3, "chunks of {chunk}");
        }
    }

    #[test]
    fn the_preface_is_not_a_frame() {
        // The preface's bytes, read as a frame header, would be a huge frame of type 0x20.
        let mut scan = FrameScan::new();
        assert_eq!(scan.feed(PREFACE), 0);
        assert_eq!(scan.feed(&frame(FRAME_HEADERS, 1, b"")), 1);
    }

    #[test]
    fn streams_opened_after_our_shutdown_began_are_not_counted() {
        let streams = H2Streams::new();
        let mut counter = StreamCounter {
            scan: FrameScan::new(),
            streams: streams.clone(),
        };
        let mut bytes = PREFACE.to_vec();
        bytes.extend(frame(FRAME_HEADERS, 1, b""));
        counter.observe(&bytes);
        streams.stop_counting();
        counter.observe(&frame(FRAME_HEADERS, 3, b""));
        counter.observe(&frame(FRAME_HEADERS, 5, b""));
        assert_eq!(streams.undispatched(), 1);
        streams.dispatched();
        assert_eq!(streams.undispatched(), 0);
    }

    #[test]
    fn undispatched_is_opened_minus_dispatched() {
        let streams = H2Streams::new();
        streams.opened.store(3, Ordering::Relaxed);
        streams.dispatched();
        assert_eq!(streams.undispatched(), 2);
        streams.dispatched();
        streams.dispatched();
        streams.dispatched();
        assert_eq!(streams.undispatched(), 0);
    }
}
