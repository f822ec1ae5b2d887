//! Null packet protection: a real TLS 1.3 handshake, then packets that are not
//! encrypted.
//!
//! Encrypting and decrypting every packet with AES-GCM and masking its header costs the
//! simulator 10-20% of its time on a full link (docs/sim.md "Speed") and changes
//! nothing a learner or a fidelity check looks at: sizes, timing and the transport's
//! decisions are the same.
//! These wrappers keep rustls for the handshake (so handshake packets, their sizes and
//! the round trips are real) and the Initial keys (derived from public values), and
//! replace the Handshake and 1-RTT keys with ones that copy: the payload is left as
//! written, the AEAD tag's bytes are still sent (so every packet has its real size) and
//! stripped on receipt, and header protection does nothing.
//!
//! Rejected alternative: a null `Session` with no handshake at all. It would save a few
//! more packets per connection but lose the handshake's real flight sizes and round
//! trips, which show in `handshake_ms` and in every new-connection request's RCT.

use std::any::Any;
use std::sync::Arc;

use bytes::BytesMut;
use quinn_proto::crypto::{
    self, CryptoError, ExportKeyingMaterialError, HeaderKey, KeyPair, Keys, PacketKey, UnsupportedVersion,
};
use quinn_proto::transport_parameters::TransportParameters;
use quinn_proto::{ConnectError, ConnectionId, Side, TransportError};

/// A packet key that copies; `tag_len` bytes are carried as the tag so sizes are real.
struct NullPacketKey {
    tag_len: usize,
}

impl PacketKey for NullPacketKey {
    fn encrypt(&self, _packet: u64, _buf: &mut [u8], _header_len: usize) {}

    fn decrypt(&self, _packet: u64, _header: &[u8], payload: &mut BytesMut) -> Result<(), CryptoError> {
        if payload.len() < self.tag_len {
            return Err(CryptoError);
        }
        payload.truncate(payload.len() - self.tag_len);
        Ok(())
    }

    fn tag_len(&self) -> usize {
        self.tag_len
    }

    fn confidentiality_limit(&self) -> u64 {
        u64::MAX
    }

    fn integrity_limit(&self) -> u64 {
        u64::MAX
    }
}

/// Header protection that leaves the header as it is.
struct NullHeaderKey {
    sample_size: usize,
}

impl HeaderKey for NullHeaderKey {
    fn decrypt(&self, _pn_offset: usize, _packet: &mut [u8]) {}

    fn encrypt(&self, _pn_offset: usize, _packet: &mut [u8]) {}

    fn sample_size(&self) -> usize {
        self.sample_size
    }
}

fn null_packet_pair(real: &KeyPair<Box<dyn PacketKey>>) -> KeyPair<Box<dyn PacketKey>> {
    KeyPair {
        local: Box::new(NullPacketKey {
            tag_len: real.local.tag_len(),
        }),
        remote: Box::new(NullPacketKey {
            tag_len: real.remote.tag_len(),
        }),
    }
}

fn null_keys(real: Keys) -> Keys {
    Keys {
        header: KeyPair {
            local: Box::new(NullHeaderKey {
                sample_size: real.header.local.sample_size(),
            }),
            remote: Box::new(NullHeaderKey {
                sample_size: real.header.remote.sample_size(),
            }),
        },
        packet: null_packet_pair(&real.packet),
    }
}

/// A rustls session whose Handshake and 1-RTT keys are null.
struct NullSession(Box<dyn crypto::Session>);

impl crypto::Session for NullSession {
    fn initial_keys(&self, dst_cid: &ConnectionId, side: Side) -> Keys {
        self.0.initial_keys(dst_cid, side)
    }

    fn handshake_data(&self) -> Option<Box<dyn Any>> {
        self.0.handshake_data()
    }

    fn peer_identity(&self) -> Option<Box<dyn Any>> {
        self.0.peer_identity()
    }

    fn early_crypto(&self) -> Option<(Box<dyn HeaderKey>, Box<dyn PacketKey>)> {
        // The simulated server refuses early data (max_early_data_size = 0).
        None
    }

    fn early_data_accepted(&self) -> Option<bool> {
        self.0.early_data_accepted()
    }

    fn is_handshaking(&self) -> bool {
        self.0.is_handshaking()
    }

    fn read_handshake(&mut self, buf: &[u8]) -> Result<bool, TransportError> {
        self.0.read_handshake(buf)
    }

    fn transport_parameters(&self) -> Result<Option<TransportParameters>, TransportError> {
        self.0.transport_parameters()
    }

    fn write_handshake(&mut self, buf: &mut Vec<u8>) -> Option<Keys> {
        self.0.write_handshake(buf).map(null_keys)
    }

    fn next_1rtt_keys(&mut self) -> Option<KeyPair<Box<dyn PacketKey>>> {
        self.0.next_1rtt_keys().map(|k| null_packet_pair(&k))
    }

    fn is_valid_retry(&self, orig_dst_cid: &ConnectionId, header: &[u8], payload: &[u8]) -> bool {
        self.0.is_valid_retry(orig_dst_cid, header, payload)
    }

    fn export_keying_material(
        &self,
        output: &mut [u8],
        label: &[u8],
        context: &[u8],
    ) -> Result<(), ExportKeyingMaterialError> {
        self.0.export_keying_material(output, label, context)
    }
}

/// A client crypto config whose sessions use null packet protection after the Initial
/// packets.
pub struct NullClientConfig(pub Arc<dyn crypto::ClientConfig>);

impl crypto::ClientConfig for NullClientConfig {
    fn start_session(
        self: Arc<Self>,
        version: u32,
        server_name: &str,
        params: &TransportParameters,
    ) -> Result<Box<dyn crypto::Session>, ConnectError> {
        let inner = self.0.clone().start_session(version, server_name, params)?;
        Ok(Box::new(NullSession(inner)))
    }
}

/// The server side of [`NullClientConfig`].
pub struct NullServerConfig(pub Arc<dyn crypto::ServerConfig>);

impl crypto::ServerConfig for NullServerConfig {
    fn initial_keys(&self, version: u32, dst_cid: &ConnectionId) -> Result<Keys, UnsupportedVersion> {
        self.0.initial_keys(version, dst_cid)
    }

    fn retry_tag(&self, version: u32, orig_dst_cid: &ConnectionId, packet: &[u8]) -> [u8; 16] {
        self.0.retry_tag(version, orig_dst_cid, packet)
    }

    fn start_session(self: Arc<Self>, version: u32, params: &TransportParameters) -> Box<dyn crypto::Session> {
        Box::new(NullSession(self.0.clone().start_session(version, params)))
    }
}
