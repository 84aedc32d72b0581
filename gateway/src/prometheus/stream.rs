//! A scrape as a list of pieces rendered one at a time while the response is sent: a scrape of
//! 100,000 queues holds the list of queues, never the whole text.

use std::convert::Infallible;
use std::sync::Arc;

use super::charon::{QueueSeries, escape_label};
use axum::body::{Body, Bytes};
use charon_engine::QueueRef;
use futures_util::StreamExt as _;

use super::family::QueueFamily;

/// Queues per rendered piece.
const CHUNK: usize = 1024;

/// One part of a response.
pub(crate) enum Piece {
    /// Text rendered already (the node-wide families: small).
    Text(String),
    /// A per-queue family's header.
    Header(&'static str, QueueFamily),
    /// A slice of its lines.
    Rows { prefix: &'static str, family: QueueFamily, queues: Arc<[QueueRef]>, from: usize },
    /// One of Charon's per-queue families, its header then a slice at a time.
    CharonHeader(QueueSeries),
    /// A slice of its lines.
    CharonRows { series: QueueSeries, queues: Arc<[QueueRef]>, from: usize },
}

impl Piece {
    /// A per-queue family over `queues`: its header, then slices.
    pub(crate) fn queue_family(prefix: &'static str, family: QueueFamily, queues: &Arc<[QueueRef]>) -> Vec<Self> {
        let mut pieces = vec![Self::Header(prefix, family)];
        pieces.extend((0..queues.len()).step_by(CHUNK).map(|from| Self::Rows {
            prefix,
            family,
            queues: Arc::clone(queues),
            from,
        }));
        pieces
    }

    /// One of Charon's per-queue families over `queues`.
    pub(crate) fn charon_series(series: QueueSeries, queues: &Arc<[QueueRef]>) -> Vec<Self> {
        let mut pieces = vec![Self::CharonHeader(series)];
        pieces.extend((0..queues.len()).step_by(CHUNK).map(|from| Self::CharonRows {
            series,
            queues: Arc::clone(queues),
            from,
        }));
        pieces
    }

    /// The piece's text.
    pub(crate) fn render(self) -> String {
        match self {
            Self::Text(text) => text,
            Self::Header(prefix, (family, _)) => {
                let mut out = String::new();
                family.header(prefix, &mut out);
                out
            }
            Self::Rows { prefix, family: (family, read), queues, from } => {
                let mut out = String::with_capacity(CHUNK * 64);
                for queue in slice(&queues, from) {
                    let labels = format!(
                        "vhost=\"{}\",queue=\"{}\"",
                        escape_label(&queue.config.vhost),
                        escape_label(queue.name())
                    );
                    family.labelled(prefix, &labels, read(&queue.gauges.load()), &mut out);
                }
                out
            }
            Self::CharonHeader(series) => series.header().to_owned(),
            Self::CharonRows { series, queues, from } => {
                let mut out = String::with_capacity(CHUNK * 64);
                series.rows(slice(&queues, from), charon_engine::clock::now_ms(), &mut out);
                out
            }
        }
    }

    /// The whole text (tests).
    #[cfg(test)]
    pub(crate) fn concat(pieces: Vec<Self>) -> String {
        pieces.into_iter().map(Self::render).collect()
    }
}

fn slice(queues: &[QueueRef], from: usize) -> &[QueueRef] {
    queues.get(from..queues.len().min(from + CHUNK)).unwrap_or(&[])
}

/// A response body that renders `pieces` as it is sent.
pub(crate) fn body(pieces: Vec<Piece>) -> Body {
    let chunks = futures_util::stream::iter(pieces).map(|piece| Ok::<_, Infallible>(Bytes::from(piece.render())));
    Body::from_stream(chunks)
}
