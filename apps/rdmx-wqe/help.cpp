// Help texts of rdmx-wqe (kept beside the code they describe; doc/guides/rdmx-wqe.md has the
// long form with examples).
#include "tool.hpp"

namespace rdmx::wqetool {

std::string_view usage_text() {
  return R"(Usage: rdmx-wqe encode [--input FILE]
  or:  rdmx-wqe decode [--pretty] [--input FILE] [WQEBB_HEX ...]
  or:  rdmx-wqe exec [--profile NAME] [--sq-wqe-cnt N] [--checker-fatal] [--input FILE]
  or:  rdmx-wqe encode --help | decode --help | exec --help | --help

Encodes verbs-shaped work requests to the exact mlx5 send-WQE bytes rdmx writes, and decodes
WQE bytes back to named fields. Both directions use rdmx's own PRM builders and decoder,
the code of the data path and of the emulated device.

  encode   one JSON request per input line -> one JSON result per line
  decode   WQEBBs as hex -> every segment's fields (JSON, or a table with --pretty)
  exec     raw send WQEs (as a real SQ holds them) run by the emulated mlx5 -> the CQEs and
           the PRM checker's reports

See encode --help, decode --help and exec --help for each command's options.

Exit status:
  0    every line was accepted
  1    a line was rejected (the error is on that line's output)
  2    a usage error: one line "rdmx-wqe: error: ..." and a pointer to --help on stderr
)";
}

std::string_view encode_help_text() {
  return R"(usage: rdmx-wqe encode [--input FILE]

Reads one JSON object per line (standard input, or FILE) and writes one JSON object per line.

REQUEST (one batch, as between ibv_wr_start and ibv_wr_complete on an mlx5 RC QP)
  qpn               QP number (24 bits)
  sq_wqe_cnt        send ring size in 64-byte WQEBBs, a power of two (1..65536)
  sq_pi             free-running producer counter before the batch (32 bits); ring slot =
                    sq_pi & (sq_wqe_cnt - 1), WQE index = sq_pi & 0xffff (wraps at 0xffff)
  fm_cache          fence mode the next WQE inherits: 0, or 32 (INITIATOR_SMALL) after a UMR;
                    optional, default 0 (also 64, 96, 128 accepted)
  max_inline_data   the QP's inline capacity in bytes: bounds inline data and inline
                    translation lists
  max_send_sge      optional: the QP's max_send_sge (more sges -> ENOMEM); default: no limit
                    beyond the 63-DS WQE size
  mkey_update_tag   optional, default true: the context reports MKEY_UPDATE_TAG (every kernel
                    since 2022), so an mkey whose low byte (tag) is not 0 may be configured;
                    false -> such an mr_list/mr_interleaved is EOPNOTSUPP, as rdma-core
  rdmx_signal_last  optional, default false: show the ring after rdmx's doorbell step, which
                    sets CQ_UPDATE on the batch's last WQE when it is unsignaled
  wrs               array of work requests, posted in order

WORK REQUEST (every op): op, and the ibv wr_flags
  signaled          IBV_SEND_SIGNALED -> CQ_UPDATE (fm_ce_se 0x08)
  fence             IBV_SEND_FENCE -> fence mode 0x80 (replaces the inherited fm_cache)
  solicited         IBV_SEND_SOLICITED -> fm_ce_se 0x02
  inline            IBV_SEND_INLINE; required (true) by mr_list and mr_interleaved
  wr_id             accepted and ignored (not part of the WQE)

OPS
  mr_list           mlx5dv_wr_mr_list: mkey, access_flags, entries [{lkey, addr, length}],
                    optional mkey_max_entries (the mkey's num_desc)
                    -> UMR: ctrl(imm = mkey) | UMR ctrl {INLINE, klm_octowords = align4(N),
                    mask FREE|KEY|LEN|LW|RR|RW|A = 0x203c2001} | mkey ctx {free 0, access,
                    qpn 0xffffff, key = mkey & 0xff, len = sum of lengths} | N KLMs padded
                    with zeroes to a multiple of 4.  DS = 8 + align4(N).  N = 0 is allowed.
                    At most min((max_inline_data + 4) / 16, mkey_max_entries) entries.
  mr_interleaved    mlx5dv_wr_mr_interleaved: mkey, access_flags, repeat_count,
                    interleaved [{lkey, addr, bytes_count, bytes_skip}], optional
                    mkey_max_entries
                    -> as mr_list, but the translation is a repeat block {byte_count = sum of
                    bytes_count, op 0x400, repeat_count, num_ent} followed by entries {stride =
                    bytes_count + bytes_skip, bytes_count, lkey, addr}, padded to 64 bytes; len
                    = sum(bytes_count) * repeat_count.  DS = 8 + align4(N + 1).  At most
                    min((max_inline_data + 4) / 16 - 1, mkey_max_entries) entries.
  rdma_write        remote_addr, rkey, data            -> RDMA_WRITE (0x08): ctrl|raddr|data
  rdma_write_imm    remote_addr, rkey, imm_data, data  -> RDMA_WRITE_IMM (0x09)
  rdma_read         remote_addr, rkey, sges            -> RDMA_READ (0x10)
  send              data                               -> SEND (0x0a): ctrl|data
  send_imm          imm_data, data                     -> SEND_IMM (0x0b)
  send_inv          invalidate_rkey, data              -> SEND_INVAL (0x01), imm = the rkey
  local_inv         invalidate_rkey                    -> UMR (rdma-core's LOCAL_INV):
                    ctrl(imm = the key) | UMR ctrl {INLINE|TRANSLATION_OFFSET|CHECK_QPN = 0x98,
                    octowords 0, mask FREE|KEY|QPN = 0x20006000} | mkey ctx {free 1, qpn
                    0xffffff, key 0}.  8 DS.
  bind_mw           ibv_wr_bind_mw: mw_rkey (the window's rkey now), rkey (after the bind),
                    optional mw_type (1 or 2, default 2), lkey, addr, length (the MR and the
                    range bound; length 0 unbinds), mw_access_flags (access_flags bits plus
                    ZERO_BASED 0x20; others -> EINVAL; length over 2 GiB -> EOPNOTSUPP)
                    -> UMR: ctrl(imm = mw_rkey) | UMR ctrl {INLINE|TRANSLATION_OFFSET, type 2
                    |CHECK_FREE = 0xb0 (type 1: 0x90), octowords 4, mask FREE|KEY|LEN|
                    START_ADDR|LW|RR|RW|A, type 2 |QPN = 0x203c6041 (type 1: 0x203c2041)} |
                    mkey ctx {free 0, access, qpn = type 2 ? the QP : 0xffffff, key = rkey &
                    0xff, start_addr = ZERO_BASED ? 0 : addr, len} | one KLM {length, lkey,
                    addr} padded with zeroes to 64 bytes.  12 DS.  length 0: 8 DS, flags 0x90
                    (type 2: |CHECK_QPN = 0x98), mask FREE|KEY (type 2: |QPN), mkey ctx {free 1,
                    qpn 0xffffff, key = rkey & 0xff}.  Fields rdma-core leaves as the ring held
                    them (unmasked mkey context fields) are written as zeroes.
  data              "sges": [{lkey, addr, length}] (ibv_wr_set_sge_list; zero-length entries
                    take no segment, as in rdma-core) or "inline_data_hex": "..." (ibv_wr_set_
                    inline_data; 0 bytes add no segment; more than max_inline_data -> ENOMEM);
                    neither = no data segment.
  access_flags      raw ibv_access_flags: LOCAL_WRITE 1, REMOTE_WRITE 2, REMOTE_READ 4,
                    REMOTE_ATOMIC 8 (others -> EINVAL); written as the mkc bits LW RW RR A.
                    Local read is not written (granted when the mkey was created).
  imm_data          host-order number, written big-endian (verbs takes it already in network
                    order).
  Numbers may be JSON integers or strings "0x..." / decimal. Unknown fields are EINVAL.

FENCES: every UMR (mr_list, mr_interleaved, local_inv, bind_mw) makes the next WQE inherit fence mode
INITIATOR_SMALL (0x20); "fence": true gives 0x80 instead. The UMR itself carries only what it
inherited.

OUTPUT
  {"rc": 0, "sq_pi_after": N, "wqebbs": ["<128 hex>", ...], "doorbell_record": N}
  wqebbs are in ring order from slot sq_pi & (sq_wqe_cnt - 1), wrapping at the ring end;
  doorbell_record is the host value of the send doorbell record, sq_pi_after & 0xffff (null
  for an empty batch: no doorbell is rung). Bytes of the last WQEBB past a WQE's ds are not
  part of it and are printed as zeroes.
  A rejected batch prints {"rc": "ENOMEM"|"EINVAL"|"EOPNOTSUPP", "error": "..."} and no bytes:
  ENOMEM     a list longer than the inline capacity or mkey_max_entries, inline data longer
             than max_inline_data, more sges than max_send_sge, a WQE over 63 DS, or a batch
             larger than the ring
  EINVAL     bad JSON, a missing/unknown field, a value out of range, bad access_flags
  EOPNOTSUPP an unknown op, mr_list/mr_interleaved without "inline": true, a non-zero mkey tag
             with mkey_update_tag false

WHERE RDMX DIFFERS FROM RDMA-CORE'S BYTES (on purpose)
  - Bytes rdma-core leaves as they were in the ring, rdmx writes as zeroes: the ctrl imm of
    ops without an immediate (ibv_wr_* API), the mkey-context fields LOCAL_INV does not set,
    and the pad after inline data. The device ignores all of them.
  - mr_interleaved: bytes_count and bytes_count + bytes_skip must fit their 16-bit fields
    (EINVAL); rdma-core truncates them silently. With max_inline_data < 12 no interleaved
    entry fits (rdma-core's size_t arithmetic wraps there and sets no limit).
  - Ring room is counted in WQEBBs against sq_wqe_cnt (ring assumed empty); rdma-core counts
    work requests against max_post. A WQE over 63 DS is ENOMEM (rdma-core relies on the QP's
    max_inline_data to keep it smaller).
  - rdmx's data path rings the doorbell with SqWriter, which signals the last WQE of a burst if
    it is unsignaled (see rdmx_signal_last); rdma-core leaves it unsignaled.
  - rdmx's window data path (rdmx::win::PollCore) does not post these verbs UMRs. Its map
    (prm::build_umr_map_inline / _pointer) writes one KLM per chunk page of one parent lkey,
    sets CHECK_FREE (the window must be unmapped first), rotates the key byte on every map, may
    carry the device's umr_fence on the UMR itself, and uses a 9-DS pointer-mode UMR for lists
    longer than the inline limit. Its unmap (prm::build_umr_invalidate) writes flags INLINE,
    mask FREE only and keeps the key. rdmx-wqe's ops are rdma-core's forms: mr_list has no
    free-state check, local_inv is 0x98 / FREE|KEY|QPN / key 0.
)";
}

std::string_view decode_help_text() {
  return R"(usage: rdmx-wqe decode [--pretty] [--input FILE] [WQEBB_HEX ...]

Decodes WQEBBs given as hex: as arguments (each a multiple of 128 hex digits; all arguments
form one list), or one line per list on standard input / FILE. A line is a JSON array of hex
strings, an encode result ({"rc":0,"wqebbs":[...]}; so `encode | decode` works), or hex
words separated by spaces. The WQEBBs are read in the order given starting with a WQE's first
WQEBB (encode prints them in ring order from sq_pi, so a WQE that wraps reads straight on).

OUTPUT (JSON, one line per input) {"rc": 0, "wqes": [WQE, ...]} where each WQE has
  wqebb, n_wqebb    position in the list and size in WQEBBs
  ctrl              opcode (name) and opcode_value, opmod, wqe_index, qpn, ds, signature,
                    fm_ce_se, fence (none | initiator-small | fence | strong-ordering |
                    small-and-fence), ce (error-only | first-error-only | always |
                    always+eqe), signaled (CQ_UPDATE), solicited, imm and imm_meaning (mkey
                    for a UMR, invalidate_rkey, imm_data, unused)
  umr_ctrl          flags and flag_names (INLINE, CHECK_FREE(fail-if-not-free),
                    CHECK_NOT_FREE(fail-if-free), TRANSLATION_OFFSET, CHECK_QPN),
                    klm_octowords, translation_offset, mkey_mask and mkey_mask_names (LEN,
                    PAGE_SIZE, START_ADDR, PD, EN_RINVAL, SIG_ERR, BSF_EN, KEY, QPN, LR, LW, RR,
                    RW, A, SMALL_FENCE, RELAXED_ORDERING_WRITE, FREE, ...)
  mkey_ctx          free, access_mode, umr_en, access and access_names (A RW RR LW LR), qpn,
                    key (tag), flags_pd, start_addr, len, translations_octword_size,
                    log_page_size
  klms              inline KLM entries {byte_count, mkey, address}; translation_pad = the
                    trailing zero entries (at most 3) that pad the list to 64 bytes
  repeat_block      when the first translation entry has op 0x400 and a num_ent that matches
                    klm_octowords: {byte_count, op, repeat_count, num_ent, entries [{stride,
                    byte_count, mkey, address}]}
  klm_pointer       pointer-mode UMR: {byte_count, mkey (lkey of the KLM array), address}
  raddr             {remote_addr, rkey}
  sges              data segments {length, lkey, addr}
  inline            {byte_count, data_hex}
With --pretty: a table per WQE with each field's byte offset inside the WQE and its meaning.

Errors ({"rc": "EINVAL", "error": "...", "wqes": [decoded so far]}, exit status 1): bad hex,
a length that is not whole WQEBBs, ds 0, a WQE longer than the WQEBBs given, an unknown
opcode, a UMR whose klm_octowords does not match ds, inline data running past ds.
The decoder never reads outside the bytes given.
)";
}

std::string_view exec_help_text() {
  return R"(usage: rdmx-wqe exec [--profile NAME] [--sq-wqe-cnt N] [--checker-fatal] [--input FILE]

Runs raw send WQEs on the emulated mlx5 (emu, inline mode) and reports what the device did:
the tool to reach for when a NIC rejects a WQE, and the way to run planted PRM violations.

The first output line is the environment every batch runs in (the same for every batch):
  {"env":{"profile","qpn","peer_qpn","sq_wqe_cnt","max_inline_data","lkey","buf","buf_len",
          "windows","window_entries","big_window","big_window_entries","mw","mw2","pd2_mw",
          "bind_lkey","bind_buf","bind_ro_lkey","bind_ro_buf","pd2_lkey","pd2_buf","mw_mr_len",
          "peer_rkey","peer_buf","peer_recvs"}}
  qpn/lkey/buf: the local QP, and a 1 MiB buffer registered with every access right; windows:
  indirect mkeys (window_entries translation entries each, free, remote invalidation on) for
  UMRs, and big_window with big_window_entries; mw, mw2: free type-2 memory windows (PD 0),
  pd2_mw one in a second PD; bind_*, bind_ro_*, pd2_*: MRs of mw_mr_len bytes inside buf,
  registered with MW_BIND and every right / remote read only (no local write) / every right in
  the second PD (lkey without MW_BIND: binding to it is refused), so a batch can break each
  bind rule; peer_*: the connected remote QP, its 1 MiB buffer (rkey), and peer_recvs 4 KiB
  receives posted from peer_buf on.

INPUT: one batch per line, a JSON object (an `rdmx-wqe encode` output line is one):
  wqebbs            the send ring from slot sq_pi & (sq_wqe_cnt - 1) on, wrapping at the ring
                    end, 128 hex digits per 64-byte WQEBB
  doorbell_record   the producer counter written to the doorbell record (default: sq_pi +
                    the number of WQEBBs, low 16 bits); more than were written makes the device
                    read what the ring holds (zeroes), less than sq_pi moves it backwards
  sq_pi             optional, 0..65535, default 0 (or sq_pi_after minus the WQEBBs of an
                    encode result): the producer counter before the batch. Every batch runs on
                    fresh, connected QPs; exec first posts sq_pi unsignaled one-WQEBB NOPs (no
                    CQE; the checker is cleared after them), so the batch meets the ring slot
                    and WQE index a real SQ would be at, ring and index wraps included
The doorbell register gets the first 8 bytes of the last WQE's control segment, as rdma-core
and rdmx ring it.

OUTPUT per batch, one JSON object per line:
  {"cqe":{"qp":"local"|"peer","opcode","wqe_counter","qpn", "syndrome","syndrome_name" (error
         CQEs) | "byte_cnt","wqe_opcode" (requester CQEs)}}   every CQE, local CQ first
  {"report":{"qp","rule","wqe_index","text"}}                  every PRM checker report
  {"batch":{"wqebbs","sq_pi","doorbell_record","cqes","reports","qp_state":"RTS"|"ERR"}}
A line that is not a batch: {"rc":"EINVAL","error":"..."}.

Options:
  --profile NAME    emu device profile (cx6dx default, cx5, cx7, atomic-umr-off, wqe512,
                    fence-strong, fence-small, fence-none, mtu1024, rd-atom4)
  --sq-wqe-cnt N    the local SQ's ring size in WQEBBs (power of two, default 64)
  --checker-fatal   a checker report also fails the offending WQE (error CQE, QP to ERR)

Exit status: 0 every line was a batch (whatever the device answered), 1 a line was not, 2 a
usage error (also: an unknown profile).
)";
}

}  // namespace rdmx::wqetool
