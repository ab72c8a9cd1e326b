// What rdmafwd's --fwd rpc carries inside RPC-over-RDMA version 1 (RFC 8166, lib/rpcrdma): an
// ONC RPC version 2 call or reply (RFC 5531 section 9, AUTH_NONE) of NFS version 3 (RFC 1813)
// NULL (proc 0), READ (proc 6) or WRITE (proc 7), bound to RDMA as RFC 8267 says: READ data
// comes back in the call's Write chunk, WRITE data goes out in a Read chunk at the XDR position
// of the data's contents (its opaque length stays inline, RFC 8166 section 3.4.5). Every item is
// XDR (RFC 4506): 4-byte big-endian words, 8-byte hypers, opaques padded to 4.
//
//   call    xid | CALL(0) | rpcvers 2 | prog 100003 | vers 3 | proc | cred AUTH_NONE, 0 |
//           verf AUTH_NONE, 0                                                     40 bytes
//   READ3args   fh (len + F bytes, padded to 4) | offset (hyper) | count        F' + 16 bytes
//   WRITE3args  fh | offset | count | stable | data length (contents: Read chunk)  F' + 24
//   reply   xid | REPLY(1) | MSG_ACCEPTED | verf AUTH_NONE, 0 | SUCCESS           24 bytes
//   READ3res    status | post_op_attr FALSE | count | eof | data length (Write chunk) 20 bytes
//   WRITE3res   status | wcc_data FALSE, FALSE | count | committed | verf (8)      28 bytes
//   a failed READ3res: status | post_op_attr FALSE; WRITE3res: status | wcc_data FALSE, FALSE
//
// The "file" is the server's memory, `io-depth` x pages-per-io bytes, a client slot s at offset
// s x io bytes. Its file handle is opaque (RFC 1813 nfs_fh3, at most 64 bytes): the server
// makes one at random for each run and hands it out at setup (setup.cpp, the welcome's "fh"),
// as a real server hands one out in a MOUNT or LOOKUP reply; a call with any other handle is
// answered NFS3ERR_BADHANDLE. Hot path: noexcept, no allocation.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>

namespace rdmafwd::nfs {

inline constexpr uint32_t kMsgCall = 0, kMsgReply = 1;
inline constexpr uint32_t kRpcVersion = 2;
inline constexpr uint32_t kNfsProgram = 100003, kNfsVersion = 3;
inline constexpr uint32_t kProcNull = 0, kProcRead = 6, kProcWrite = 7;
inline constexpr uint32_t kAuthNone = 0;
inline constexpr uint32_t kMsgAccepted = 0, kAcceptSuccess = 0;
inline constexpr uint32_t kNfs3Ok = 0, kNfs3ErrIo = 5;
inline constexpr uint32_t kNfs3ErrBadHandle = 10001;  // "illegal NFS file handle" (RFC 1813 2.6)
inline constexpr uint32_t kFileSync = 2;              // stable_how FILE_SYNC
inline constexpr uint32_t kFhMaxBytes = 64;           // NFS3_FHSIZE
inline constexpr uint8_t kWriteVerf[8] = {'r', 'd', 'm', 'x', 'v', 'e', 'r', 'f'};
inline constexpr uint32_t kCallHeaderBytes = 40;
inline constexpr uint32_t kReplyHeaderBytes = 24;
// XDR's padding of an opaque of n bytes to a multiple of 4 (RFC 4506 4.10).
inline constexpr uint32_t xdr_pad(uint32_t n) noexcept {
  return (n + 3) & ~3u;
}
// The WRITE data's contents start here in the RPC message (the Read chunk's XDR position): after
// the call header, the handle (length + padded bytes), offset, count, stable and data length.
inline constexpr uint32_t write_data_position(uint32_t fh_len) noexcept {
  return kCallHeaderBytes + 4 + xdr_pad(fh_len) + 8 + 4 + 4 + 4;
}

struct Call {
  uint32_t xid = 0;
  uint32_t proc = kProcNull;
  uint64_t offset = 0;
  uint32_t count = 0;
  uint32_t stable = kFileSync;  // WRITE
  uint32_t data_len = 0;        // WRITE: the opaque's length (its contents are in the Read chunk)
  // READ, WRITE: the file handle (encode: the one to send, at most kFhMaxBytes; decode: where
  // it lies in the message).
  std::span<const uint8_t> fh;
};

struct Reply {
  uint32_t xid = 0;
  uint32_t status = kNfs3Ok;
  uint32_t count = 0;
  bool eof = false;        // READ
  uint32_t data_len = 0;   // READ: the opaque's length (its contents are in the Write chunk)
  uint32_t committed = 0;  // WRITE
};

// XDR cursor over a buffer; a write or read past the end latches !ok.
class Xdr {
 public:
  explicit Xdr(std::span<uint8_t> b) noexcept : w_(b.data()), r_(b.data()), n_(b.size()) {}
  explicit Xdr(std::span<const uint8_t> b) noexcept : r_(b.data()), n_(b.size()) {}
  void put(uint32_t v) noexcept {
    if (!room(4)) return;
    const uint8_t b[4] = {uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)};
    std::memcpy(w_ + pos_, b, 4);
    pos_ += 4;
  }
  void put64(uint64_t v) noexcept {
    put(static_cast<uint32_t>(v >> 32));
    put(static_cast<uint32_t>(v));
  }
  void put_bytes(const uint8_t* p, uint32_t n) noexcept {  // then zeros to a multiple of 4
    if (!room(xdr_pad(n))) return;
    std::memcpy(w_ + pos_, p, n);
    std::memset(w_ + pos_ + n, 0, xdr_pad(n) - n);
    pos_ += xdr_pad(n);
  }
  uint32_t get() noexcept {
    if (!room(4)) return 0;
    const uint8_t* b = r_ + pos_;
    pos_ += 4;
    return uint32_t{b[0]} << 24 | uint32_t{b[1]} << 16 | uint32_t{b[2]} << 8 | b[3];
  }
  uint64_t get64() noexcept {
    const uint64_t hi = get();
    return hi << 32 | get();
  }
  const uint8_t* get_bytes(uint32_t n) noexcept {
    if (!room(n)) return nullptr;
    const uint8_t* p = r_ + pos_;
    pos_ += n;
    return p;
  }
  bool ok() const noexcept { return ok_; }
  bool at_end() const noexcept { return ok_ && pos_ == n_; }
  uint32_t pos() const noexcept { return static_cast<uint32_t>(pos_); }

 private:
  bool room(size_t k) noexcept {
    if (!ok_ || n_ - pos_ < k) ok_ = false;
    return ok_;
  }
  uint8_t* w_ = nullptr;
  const uint8_t* r_ = nullptr;
  size_t n_ = 0, pos_ = 0;
  bool ok_ = true;
};

// Writes the RPC call message (header and arguments; WRITE without its data's contents) at the
// start of `out`: its length in bytes, 0 when `out` is too short.
inline uint32_t encode_call(const Call& c, std::span<uint8_t> out) noexcept {
  Xdr x(out);
  for (uint32_t v : {c.xid, kMsgCall, kRpcVersion, kNfsProgram, kNfsVersion, c.proc, kAuthNone, 0u,
                     kAuthNone, 0u})
    x.put(v);
  if (c.proc == kProcRead || c.proc == kProcWrite) {
    if (c.fh.size() > kFhMaxBytes) return 0;
    x.put(static_cast<uint32_t>(c.fh.size()));
    x.put_bytes(c.fh.data(), static_cast<uint32_t>(c.fh.size()));
    x.put64(c.offset);
    x.put(c.count);
    if (c.proc == kProcWrite) {
      x.put(c.stable);
      x.put(c.data_len);
    }
  }
  return x.ok() ? x.pos() : 0;
}

// Reads an RPC call message. False when it is not an ONC RPC v2 call of NFSv3 with AUTH_NONE
// credentials and verifier, is cut short, or has bytes after its arguments (WRITE: after its
// data's length; the contents must come in a Read chunk). An unknown procedure decodes (proc
// says which) with no arguments read. `fh`: the handle as sent (the caller compares it).
inline bool decode_call(std::span<const uint8_t> msg, Call& c) noexcept {
  Xdr x(msg);
  c.xid = x.get();
  if (x.get() != kMsgCall || x.get() != kRpcVersion || x.get() != kNfsProgram ||
      x.get() != kNfsVersion)
    return false;
  c.proc = x.get();
  if (x.get() != kAuthNone || x.get() != 0 || x.get() != kAuthNone || x.get() != 0) return false;
  if (c.proc == kProcRead || c.proc == kProcWrite) {
    const uint32_t fh_len = x.get();
    if (fh_len > kFhMaxBytes) return false;  // nfs_fh3: opaque<NFS3_FHSIZE>
    const uint8_t* fh = x.get_bytes(xdr_pad(fh_len));
    c.fh = fh ? std::span<const uint8_t>(fh, fh_len) : std::span<const uint8_t>();
    c.offset = x.get64();
    c.count = x.get();
    if (c.proc == kProcWrite) {
      c.stable = x.get();
      c.data_len = x.get();
    }
  }
  return x.at_end() ||
         (x.ok() && c.proc != kProcNull && c.proc != kProcRead && c.proc != kProcWrite);
}

// The accepted reply to `proc` (NULL: nothing after the header).
inline uint32_t encode_reply(uint32_t proc, const Reply& r, std::span<uint8_t> out) noexcept {
  Xdr x(out);
  for (uint32_t v : {r.xid, kMsgReply, kMsgAccepted, kAuthNone, 0u, kAcceptSuccess}) x.put(v);
  if (proc == kProcRead) {
    x.put(r.status);
    x.put(0);  // post_op_attr: no attributes
    if (r.status == kNfs3Ok) {
      x.put(r.count);
      x.put(r.eof ? 1 : 0);
      x.put(r.data_len);
    }
  } else if (proc == kProcWrite) {
    x.put(r.status);
    x.put(0);  // wcc_data: pre_op_attr FALSE,
    x.put(0);  //           post_op_attr FALSE
    if (r.status == kNfs3Ok) {
      x.put(r.count);
      x.put(r.committed);
      x.put_bytes(kWriteVerf, sizeof kWriteVerf);
    }
  }
  return x.ok() ? x.pos() : 0;
}

// Reads the accepted reply to a call of `proc`. False when it is anything else, or cut short.
inline bool decode_reply(uint32_t proc, std::span<const uint8_t> msg, Reply& r) noexcept {
  Xdr x(msg);
  r.xid = x.get();
  if (x.get() != kMsgReply || x.get() != kMsgAccepted || x.get() != kAuthNone || x.get() != 0 ||
      x.get() != kAcceptSuccess)
    return false;
  if (proc == kProcNull) return x.at_end();
  r.status = x.get();
  if (proc == kProcRead) {
    if (x.get() != 0) return false;  // no attributes were asked for
    if (r.status == kNfs3Ok) {
      r.count = x.get();
      r.eof = x.get() != 0;
      r.data_len = x.get();
    }
  } else {
    if (x.get() != 0 || x.get() != 0) return false;
    if (r.status == kNfs3Ok) {
      r.count = x.get();
      r.committed = x.get();
      x.get_bytes(sizeof kWriteVerf);
    }
  }
  return x.at_end();
}

}  // namespace rdmafwd::nfs
