// RPC-over-RDMA version 1 transport header codec (RFC 8166 sections 4 and 5): the header that
// precedes every RPC message on an RPC/RDMA connection, with its chunk lists. See
// doc/guides/rpcrdma.md.
//
//   +-------+-------+---------+------+---------------------------------------------+
//   |  xid  | vers  | credits | proc | body (by proc)                              |
//   +-------+-------+---------+------+---------------------------------------------+
//   RDMA_MSG / RDMA_NOMSG:  Read list | Write list | Reply chunk   (then, for RDMA_MSG only,
//                           the RPC message inline)
//   RDMA_ERROR:             err (ERR_VERS: low, high | ERR_CHUNK: nothing)
//
// Every item is an XDR unsigned int (RFC 4506 section 4.2: 4 bytes, big-endian) or hyper (the
// 64-bit segment offset, section 4.5). A Read list and a Write list are XDR linked lists
// ("optional-data", section 4.19): each item is preceded by 1, the list ends with 0. A Write
// chunk and the Reply chunk are counted arrays of segments (section 4.13); the Reply chunk is
// optional (1 + array, or 0).
//
// Decode and encode work in place on the caller's buffer: no allocation, no exception; every
// function here is noexcept and may run on a poll core. The decoded form has fixed capacity
// (kMaxReadSegments, kMaxWriteChunks x kMaxSegments, kMaxSegments); a header that does not fit
// is refused, as is any header past the inline threshold (RFC 8166 section 3.3.2: 1024 bytes
// unless the peers agreed otherwise).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace rdmx::rpcrdma {

inline constexpr uint32_t kVersion = 1;
// RFC 8166 section 3.3.3: the inline threshold both directions start from without an agreement
// (RFC 8797 private data can raise it).
inline constexpr uint32_t kDefaultInlineThreshold = 1024;
inline constexpr uint32_t kMaxSegments = 16;      // segments in one Write chunk or the Reply chunk
inline constexpr uint32_t kMaxReadSegments = 16;  // Read segments in the Read list, all positions
inline constexpr uint32_t kMaxWriteChunks = 4;    // Write chunks in the Write list
inline constexpr uint32_t kFixedBytes = 16;       // xid, vers, credits, proc
inline constexpr uint32_t kSegmentBytes = 16;     // handle, length, offset (hyper)

// rdma_proc (RFC 8166 section 5.1). kMsgp and kDone are deprecated in version 1: never encoded,
// refused by decode.
enum class Proc : uint32_t { kMsg = 0, kNoMsg = 1, kMsgp = 2, kDone = 3, kError = 4 };
// rpcrdma_errcode
enum class ErrCode : uint32_t { kVers = 1, kChunk = 2 };

// xdr_rdma_segment: `length` bytes at `offset` in the memory registered under `handle` (an
// rkey; for an rdmx window, offset is its zero-based IOVA).
struct Segment {
  uint32_t handle = 0;
  uint32_t length = 0;
  uint64_t offset = 0;
  bool operator==(const Segment&) const = default;
};

// One item of the Read list: a segment to pull from the requester, at XDR `position` of the RPC
// message (a multiple of 4; 0 = the whole message, a "Position-Zero Read chunk"). Consecutive
// items with one position make one Read chunk.
struct ReadSegment {
  uint32_t position = 0;
  Segment target;
  bool operator==(const ReadSegment&) const = default;
};

// A Write chunk or the Reply chunk: a counted array of segments.
struct Chunk {
  uint32_t n_segments = 0;
  std::array<Segment, kMaxSegments> segments{};
  std::span<const Segment> view() const noexcept { return {segments.data(), n_segments}; }
  uint64_t bytes() const noexcept;                 // sum of the segments' lengths
  bool operator==(const Chunk& o) const noexcept;  // the first n_segments only
};

struct Header {
  uint32_t xid = 0;
  uint32_t vers = kVersion;
  uint32_t credits = 0;  // requested (call) or granted (reply): RFC 8166 section 3.3.1
  Proc proc = Proc::kMsg;
  // RDMA_MSG / RDMA_NOMSG
  uint32_t n_reads = 0;
  std::array<ReadSegment, kMaxReadSegments> reads{};
  uint32_t n_writes = 0;
  std::array<Chunk, kMaxWriteChunks> writes{};
  bool has_reply = false;
  Chunk reply;
  // RDMA_ERROR
  ErrCode err = ErrCode::kChunk;
  uint32_t vers_low = 0;  // ERR_VERS: the versions the sender supports
  uint32_t vers_high = 0;
  // The fields `proc` uses, and only those (stale entries past the counts are ignored).
  bool operator==(const Header& o) const noexcept;
};

// Which side's rules apply on top of the format's. A header's bytes do not say whether it is a
// call or a reply; the receiver knows.
//   kAny    the format and the rules for both directions
//   kCall   also: RDMA_NOMSG carries a Position-Zero Read chunk (RFC 8166 section 3.5.3); no
//           RDMA_ERROR; no empty Write or Reply chunk and no zero-length segment in them (the
//           requester offers memory: Linux rpc_rdma.c rpcrdma_encode_write_list never does)
//   kReply  also: no Read list (Linux rpc_rdma.c decode_read_list refuses one); RDMA_NOMSG
//           carries a Reply chunk (rpcrdma_decode_nomsg)
enum class Role : uint8_t { kAny, kCall, kReply };

enum class Error : uint8_t {
  kOk = 0,
  kTruncated,           // the buffer ends inside a field
  kBadVersion,          // vers != 1 (answer with RDMA_ERROR ERR_VERS; peek_xid gives the xid)
  kBadProc,             // proc is not an rdma_proc value
  kDeprecatedProc,      // RDMA_MSGP or RDMA_DONE
  kBadDiscriminator,    // an optional-data discriminator neither 0 nor 1
  kTooManySegments,     // a chunk or the Read list holds more than the capacity
  kTooManyChunks,       // the Write list holds more than kMaxWriteChunks chunks
  kCountPastBuffer,     // an array count whose segments do not fit in the buffer
  kZeroLengthSegment,   // a Read segment (or, in a call, any segment) of length 0
  kEmptyChunk,          // a call's Write or Reply chunk without segments
  kMisalignedPosition,  // a Read segment's XDR position not a multiple of 4
  kNoMsgWithoutChunks,  // RDMA_NOMSG without the chunk that carries its RPC message
  kChunksInError,       // chunk lists given to an RDMA_ERROR (encode)
  kBadErrorCode,        // RDMA_ERROR with neither ERR_VERS nor ERR_CHUNK
  kBadVersionRange,     // ERR_VERS with low > high
  kTrailingBytes,       // bytes after an RDMA_ERROR or RDMA_NOMSG header: nothing follows them
  kTooLong,             // message (decode) or header (encode) past the inline threshold
  kNoRoom,              // encode: the buffer is shorter than the header
  kWrongDirection,      // a Read list in a reply, RDMA_ERROR in a call
};
inline constexpr uint32_t kNumErrors = static_cast<uint32_t>(Error::kWrongDirection) + 1;
// Short stable name ("truncated", "bad-version", ...). Never NULL.
const char* error_name(Error e) noexcept;
// One sentence saying what was wrong. Never NULL.
const char* error_text(Error e) noexcept;

// What decode/encode did: on success the header's length in bytes (decode: the RPC message of an
// RDMA_MSG starts there); on refusal the error and the byte offset of the field refused.
struct CodecResult {
  Error error = Error::kOk;
  uint32_t length = 0;  // header bytes (ok) or offset of the refused field
  bool ok() const noexcept { return error == Error::kOk; }
};

// Decodes the transport header at the start of `msg` (a received message, header and inline RPC
// message) into `out`. Refused (out untouched): any Error above but kNoRoom/kChunksInError, or
// a message longer than `inline_threshold`. Reads only msg[0 .. msg.size()). Hot path.
CodecResult decode(std::span<const uint8_t> msg, Header& out, Role role = Role::kAny,
                   uint32_t inline_threshold = kDefaultInlineThreshold) noexcept;

// Encodes `h` at the start of `buf`; the RPC message of an RDMA_MSG goes at buf[length]. The same
// rules as decode (a header encode accepts, decode accepts with the same role), plus kNoRoom
// (buf too short), kTooLong (header past `inline_threshold`), kChunksInError. Refused: nothing
// written. Hot path.
CodecResult encode(const Header& h, std::span<uint8_t> buf, Role role = Role::kAny,
                   uint32_t inline_threshold = kDefaultInlineThreshold) noexcept;

// The bytes encode() writes for `h` (counts clamped to the capacities). Hot path.
uint32_t encoded_size(const Header& h) noexcept;

// The xid of a message whose header was refused (to answer RDMA_ERROR): false when msg holds
// fewer than 4 bytes.
bool peek_xid(std::span<const uint8_t> msg, uint32_t* xid) noexcept;

// An RDMA_ERROR reply to `xid` (RFC 8166 section 4.5): ERR_VERS naming version 1 as the only one
// supported, or ERR_CHUNK.
Header error_reply(uint32_t xid, uint32_t credits, ErrCode err) noexcept;

}  // namespace rdmx::rpcrdma
