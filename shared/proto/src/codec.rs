//! The codec of every generated service and client: prost's, except that a message that cannot be
//! decoded is refused as the caller's error, with a reason.
//!
//! prost reports undecodable bytes (a truncated or garbled message, invalid UTF-8 in a `string`
//! field) as `INTERNAL "failed to decode Protobuf message"` without an `ErrorInfo`, so a client's
//! garbage looked like the server's bug and fired alerts on `INTERNAL`. Here it is
//! `INVALID_ARGUMENT` with reason `INVALID_ARGUMENT` and metadata `field = "(message)"`, as the
//! protos document; the decode error's own description follows in the message. A client that
//! receives an undecodable response sees the same, from its own decoder.

use std::{collections::HashMap, marker::PhantomData};

use prost::Message;
use tonic::{
    Code, Status,
    codec::{BufferSettings, DecodeBuf},
};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};
use tonic_types::{ErrorDetails, StatusExt as _};

/// The `ErrorInfo.domain` of a message refused by the codec, before any service saw it.
pub const DOMAIN: &str = "snug.rpc";

/// The value of metadata `field` for a message that cannot be decoded as a whole.
pub const WHOLE_MESSAGE: &str = "(message)";

/// prost's codec with typed decode errors (see the module docs).
#[derive(Debug, Clone)]
pub struct Codec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for Codec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T, U> tonic::codec::Codec for Codec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = Decoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::raw_encoder(BufferSettings::default())
    }

    fn decoder(&mut self) -> Self::Decoder {
        Decoder(ProstCodec::<T, U>::raw_decoder(BufferSettings::default()))
    }
}

/// prost's decoder, its errors typed.
#[derive(Debug, Clone)]
pub struct Decoder<U>(ProstDecoder<U>);

impl<U: Message + Default> tonic::codec::Decoder for Decoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        self.0
            .decode(buf)
            .map_err(|status| undecodable(status.message()))
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}

/// `INVALID_ARGUMENT`, reason `INVALID_ARGUMENT`, for a message that cannot be decoded.
pub fn undecodable(why: &str) -> Status {
    Status::with_error_details(
        Code::InvalidArgument,
        format!("the message cannot be decoded ({why})"),
        ErrorDetails::with_error_info(
            "INVALID_ARGUMENT",
            DOMAIN,
            HashMap::from([("field".to_owned(), WHOLE_MESSAGE.to_owned())]),
        ),
    )
}
