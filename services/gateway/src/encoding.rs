//! Content codings (issue 38): the delta routes take a `Content-Encoding: zstd` body and answer
//! `zstd` to a client that accepts it, so the literal pages of a small edit travel compressed.
//!
//! Only the delta routes code their bodies: they carry what an edit moves. [`delta_codings`]
//! wraps those routes: it marks the request as one whose body may be coded (read by
//! [`crate::upload::Upload`], which refuses a coded body anywhere else with 415 and
//! `Accept-Encoding: identity`, rather than take compressed bytes for an image), encodes a 200
//! answer for a client whose `Accept-Encoding` takes `zstd`, and states on every answer that the
//! route takes `zstd` bodies (`Accept-Encoding` in a response, RFC 7694).
//!
//! A coded body's length is the content size its first frame declares (read from its first 18
//! bytes as sent, [`declared_size`]), which the service is told as it is told a plain body's
//! `Content-Length`, so a coded delta is admitted for what it holds; such a body must decode to
//! exactly that length. A body whose frame declares none is admitted for its limit.
//! A coded body is decoded as it arrives ([`Inflate`]), in pieces of at most one gRPC chunk, so
//! a small body that decodes to a lot holds one chunk at a time and meets the service's own bound
//! on what it reads; a frame may ask for RFC 9659's largest window for this coding, 8 MiB, which
//! is then the decoder's memory. A body that ends inside a frame, or is not zstd, is refused
//! (`BODY_ENCODING_INVALID`) like a body that broke off: the service sees the call cancelled.
//! An encoded answer streams without a `Content-Length`; a client tells a cut-off answer by its
//! unfinished frame. The delta inside is checked as before (page ids, the image's SHA-256): the
//! coding is transport, not a second format.

use axum::{
    body::Body,
    extract::Request,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    middleware::Next,
    response::Response,
};
use bytes::Bytes;
use futures::{Stream, StreamExt as _};
use zstd::stream::raw::{DParameter, Decoder, Encoder, InBuffer, Operation as _, OutBuffer};

use crate::error::ApiError;

/// The coding's name in `Content-Encoding` and `Accept-Encoding`.
pub const ZSTD: &str = "zstd";

/// The largest window a `zstd` body may use: 2^23 = 8 MiB (RFC 9659 §3).
const WINDOW_LOG_MAX: u32 = 23;

/// zstd's own default level: most of the ratio at a small share of the time of higher ones.
const LEVEL: i32 = 3;

/// The mark [`delta_codings`] leaves on a request whose body may be `zstd`.
#[derive(Debug, Clone, Copy)]
pub struct TakesZstd;

/// A request body's content coding, as the route takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coding {
    /// The bytes as they are.
    Identity,
    /// Zstandard (RFC 8878).
    Zstd,
}

/// The coding of a request body, refused with 415 unless the route takes it.
pub fn request_coding(headers: &HeaderMap, takes_zstd: bool) -> Result<Coding, ApiError> {
    let codings: Vec<String> = headers
        .get_all(header::CONTENT_ENCODING)
        .iter()
        .flat_map(|v| v.to_str().unwrap_or("\u{0}").split(','))
        .map(|c| c.trim().to_ascii_lowercase())
        .filter(|c| !c.is_empty() && c != "identity")
        .collect();
    match codings.as_slice() {
        [] => Ok(Coding::Identity),
        [only] if only == ZSTD && takes_zstd => Ok(Coding::Zstd),
        _ => Err(ApiError::from_reason(
            &snug_reasons::gateway::UNSUPPORTED_CONTENT_ENCODING,
            if takes_zstd {
                "this route takes a body as it is or in Content-Encoding: zstd, one coding"
            } else {
                "this route takes its body as it is, with no Content-Encoding (only the delta \
                 routes take zstd)"
            },
        )),
    }
}

/// Whether a client's `Accept-Encoding` takes `zstd` (named, or `*`, with a q-value above 0).
pub fn accepts_zstd(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let mut parts = item.split(';');
            let coding = parts.next().unwrap_or("").trim();
            let weighted_out = parts.any(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q <= 0.0)
            });
            (coding.eq_ignore_ascii_case(ZSTD) || coding == "*") && !weighted_out
        })
}

/// The delta routes' middleware: coded request bodies allowed, a 200 answer encoded for a
/// client that takes `zstd`, and every answer saying the route takes `zstd` bodies.
pub async fn delta_codings(mut request: Request, next: Next) -> Response {
    let encode = accepts_zstd(request.headers());
    request.extensions_mut().insert(TakesZstd);
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(header::ACCEPT_ENCODING, HeaderValue::from_static(ZSTD));
    headers.append(header::VARY, HeaderValue::from_static("accept-encoding"));
    if !encode || response.status() != StatusCode::OK {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts
        .headers
        .insert(header::CONTENT_ENCODING, HeaderValue::from_static(ZSTD));
    Response::from_parts(parts, Body::from_stream(deflate(body.into_data_stream())))
}

/// `stream` encoded as one zstd frame, a piece out whenever the encoder has output.
fn deflate<E: std::fmt::Display>(
    stream: impl Stream<Item = Result<Bytes, E>> + Send + 'static,
) -> impl Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static {
    let state = Deflate::new().map(|deflate| (Box::pin(stream), deflate));
    futures::stream::unfold(Some(state), |state| async move {
        let (mut stream, mut deflate) = match state? {
            Ok(state) => state,
            Err(err) => return Some((Err(err), None)),
        };
        loop {
            let out = match stream.next().await {
                Some(Ok(piece)) => deflate.feed(&piece),
                Some(Err(err)) => Err(std::io::Error::other(err.to_string())),
                None => return Some((deflate.finish().map(Bytes::from), None)),
            };
            match out {
                Ok(out) if out.is_empty() => continue,
                Ok(out) => return Some((Ok(Bytes::from(out)), Some(Ok((stream, deflate))))),
                Err(err) => return Some((Err(err), None)),
            }
        }
    })
}

/// One zstd frame being encoded.
pub struct Deflate(Encoder<'static>);

impl Deflate {
    /// An encoder at zstd's default level.
    pub fn new() -> std::io::Result<Self> {
        Encoder::new(LEVEL).map(Self)
    }

    /// Encodes `piece`: the output the encoder has ready (often none).
    pub fn feed(&mut self, piece: &[u8]) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::new();
        let mut input = InBuffer::around(piece);
        while input.pos < piece.len() {
            out.reserve(zstd::zstd_safe::CCtx::out_size());
            let filled = out.len();
            let mut output = OutBuffer::around_pos(&mut out, filled);
            self.0.run(&mut input, &mut output)?;
        }
        Ok(out)
    }

    /// Ends the frame: the rest of the output.
    pub fn finish(mut self) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::new();
        loop {
            out.reserve(zstd::zstd_safe::CCtx::out_size());
            let filled = out.len();
            let mut output = OutBuffer::around_pos(&mut out, filled);
            if self.0.finish(&mut output, true)? == 0 {
                return Ok(out);
            }
        }
    }
}

/// The most bytes a zstd frame header takes (RFC 8878 §3.1.1): what is read of a coded body to
/// learn the size it declares.
pub const FRAME_HEADER_MAX: usize = 18;

/// The content size the zstd frame starting `head` declares, if it declares one.
pub fn declared_size(head: &[u8]) -> Option<u64> {
    zstd::zstd_safe::get_frame_content_size(head).ok().flatten()
}

/// A coded request body being decoded: input in as it arrives, output out in bounded pieces.
pub struct Inflate {
    decoder: Decoder<'static>,
    /// Input not yet decoded, and how much of it was.
    input: Bytes,
    at: usize,
    /// Whether the last input ended inside a frame.
    in_frame: bool,
    /// Bytes decoded so far, and the length they must come to when the body declared one.
    decoded: u64,
    declared: Option<u64>,
}

impl Inflate {
    /// A decoder that takes windows up to 8 MiB.
    pub fn new() -> Result<Self, ApiError> {
        let mut decoder = Decoder::new().map_err(invalid)?;
        decoder
            .set_parameter(DParameter::WindowLogMax(WINDOW_LOG_MAX))
            .map_err(invalid)?;
        Ok(Self {
            decoder,
            input: Bytes::new(),
            at: 0,
            in_frame: false,
            decoded: 0,
            declared: None,
        })
    }

    /// Holds the body to the length its first frame declared: the service is told it, as it is
    /// told a plain body's `Content-Length`, so the body must decode to exactly that (one frame,
    /// as a one-shot encoder writes it).
    pub fn declare(&mut self, length: u64) {
        self.declared = Some(length);
    }

    /// Takes the next bytes of the body, once [`Inflate::take`] has answered empty.
    pub fn give(&mut self, input: Bytes) {
        debug_assert_eq!(self.at, self.input.len());
        self.input = input;
        self.at = 0;
    }

    /// Up to `max` decoded bytes; empty once the input given is used up and decoded.
    pub fn take(&mut self, max: usize) -> Result<Bytes, ApiError> {
        let mut out = Vec::with_capacity(max);
        while out.len() < max {
            let before = out.len();
            let mut input = InBuffer::around(&self.input[self.at..]);
            let mut output = OutBuffer::around_pos(&mut out, before);
            let hint = self.decoder.run(&mut input, &mut output).map_err(invalid)?;
            let used = input.pos;
            if used == 0 && out.len() == before {
                break;
            }
            self.at += used;
            self.in_frame = hint != 0;
            self.decoded += (out.len() - before) as u64;
            if self
                .declared
                .is_some_and(|declared| self.decoded > declared)
            {
                return Err(invalid("the body decodes to more than its frame declares"));
            }
            // Room left in the output with the input used up: the decoder gave all it had.
            if self.at == self.input.len() && out.len() < max {
                break;
            }
        }
        Ok(Bytes::from(out))
    }

    /// Checks that the body ended between frames.
    pub fn finish(&self) -> Result<(), ApiError> {
        if self.in_frame {
            return Err(invalid("the body ended inside a zstd frame"));
        }
        if self
            .declared
            .is_some_and(|declared| self.decoded != declared)
        {
            return Err(invalid("the body decodes to other than its frame declares"));
        }
        Ok(())
    }
}

fn invalid(err: impl std::fmt::Display) -> ApiError {
    ApiError::from_reason(
        &snug_reasons::gateway::BODY_ENCODING_INVALID,
        format!("the body is not a valid zstd stream (windows up to 8 MiB): {err}"),
    )
}

#[cfg(test)]
mod tests;
