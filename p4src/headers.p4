/* ecntune — headers, metadata and the telemetry digest.
 *
 * Number formats shared with the control plane are documented in p4src/README.md and
 * implemented, on the Python side, only in p4src/encoding.py.
 */
#ifndef ECNTUNE_HEADERS_P4
#define ECNTUNE_HEADERS_P4

const bit<9>  CPU_PORT = 255;
const bit<32> N_PORTS = 256;           // register arrays are indexed by port 0..255
const bit<32> MAX_FRAME_BYTES = 1522;  // the largest frame on a 1500-byte MTU link (802.1Q tag, FCS)
const bit<32> MAX_IN_INGRESS = 64;     // packets counted but not yet enqueued, at most (BMv2)
const bit<16> ETHERTYPE_IPV4 = 0x0800;
const bit<8>  PROTO_TCP = 6;
const bit<8>  PROTO_UDP = 17;

// PacketOut opcodes (packet_out.opcode)
const bit<8> OP_FORWARD = 0;           // send the payload out of packet_out.egress_port
const bit<8> OP_SET_ECN = 1;           // payload: ecn_config, applied to ecn_config.port
const bit<8> OP_SET_INTERVAL = 2;      // payload: ecn_config, interval in ecn_config.kmin (us)

// PacketIn reasons (packet_in.reason)
const bit<8> REASON_CONFIG_ACK = 1;    // a control packet, reflected after it took effect

// Drop reasons (index of the `drops` counter)
const bit<32> DROP_UNKNOWN_DST = 0;
const bit<32> DROP_TTL_EXPIRED = 1;
const bit<32> DROP_NOT_IPV4 = 2;
const bit<32> DROP_MALFORMED = 3;

const bit<48> DEFAULT_INTERVAL_US = 10000;   // telemetry interval while the register holds 0
const bit<32> ELEPHANT_BYTES = 1000000;      // a flow is an elephant past 1 MB
const bit<32> FLOW_SLOTS = 4096;
const bit<16> LOG2_PMAX_ONE = 211;           // log2_16(10000): pmax 1.0 in basis points
const bit<16> QLEN_KEY_AT_ALPHA = 128;       // a queue of α bytes keys as 128
const bit<16> FULL_KEY = 255;                // a link fully used (or pmax 1.0) keys as 255

typedef bit<48> mac_t;
typedef bit<32> ipv4_t;

@controller_header("packet_out")
header packet_out_h {
    bit<16> egress_port;
    bit<8>  opcode;
    bit<8>  reserved;
}

@controller_header("packet_in")
header packet_in_h {
    bit<16> ingress_port;
    bit<8>  reason;
    bit<8>  reserved;
}

// Payload of OP_SET_ECN / OP_SET_INTERVAL control packets: one port's whole setting, so the
// data plane applies it in one pass (never a kmin from one setting with a kmax from another).
header ecn_config_h {
    bit<16> port;
    bit<32> kmin;      // bytes (OP_SET_INTERVAL: the interval in microseconds)
    bit<32> kmax;      // bytes
    bit<64> slope;     // floor(pmax * 2^32 / (kmax - kmin)); 0 when kmax == kmin
    bit<16> pmax;      // pmax in basis points (1/10000), reported back in telemetry
}

header ethernet_h {
    mac_t   dst_addr;
    mac_t   src_addr;
    bit<16> ether_type;
}

header ipv4_h {
    bit<4>  version;
    bit<4>  ihl;
    bit<6>  dscp;
    bit<2>  ecn;
    bit<16> total_len;
    bit<16> identification;
    bit<3>  flags;
    bit<13> frag_offset;
    bit<8>  ttl;
    bit<8>  protocol;
    bit<16> hdr_checksum;
    ipv4_t  src_addr;
    ipv4_t  dst_addr;
}

header tcp_h {
    bit<16> src_port;
    bit<16> dst_port;
    bit<32> seq_no;
    bit<32> ack_no;
    bit<4>  data_offset;
    bit<4>  res;
    bit<8>  flags;
    bit<16> window;
    bit<16> checksum;
    bit<16> urgent_ptr;
}

header udp_h {
    bit<16> src_port;
    bit<16> dst_port;
    bit<16> length;
    bit<16> checksum;
}

struct headers_t {
    packet_out_h packet_out;
    packet_in_h  packet_in;
    ecn_config_h ecn_config;
    ethernet_h   ethernet;
    ipv4_h       ipv4;
    tcp_h        tcp;
    udp_h        udp;
}

// One egress port's counters over one interval (see PortTelemetry in agent/telemetry.py).
struct telemetry_digest_t {
    bit<16> port;
    bit<48> interval_us;
    bit<32> tx_bytes;
    bit<32> tx_pkts;
    bit<32> marked_bytes;
    bit<32> marked_pkts;
    bit<64> qdepth_sum_bytes;
    bit<32> qdepth_samples;
    bit<32> qdepth_max_bytes;
    bit<32> kmin;
    bit<32> kmax;
    bit<16> pmax;
    bit<64> sender_bitmap;
    bit<32> elephant_bytes;
}

// The in-switch policy's keys (p4src/README.md "The policy in the switch"; the same numbers
// as agent/features.py `switch_features`): each an 8-bit log-scale value of the interval
// that just closed, computed without division.
struct policy_keys_t {
    bit<8>  port_class;   // which tree the port's speed uses (0: no in-switch policy)
    bit<16> log2_alpha;   // 16·log2 of the class's α in bytes
    bit<16> rate_offset;  // 16·log2 of the class's link speed over 8 Mbit/s
    bit<8>  qlen;
    bit<8>  tx_rate;
    bit<8>  marked_rate;
    bit<8>  kmin;
    bit<8>  kmax;
    bit<8>  pmax;
}

struct metadata_t {
    bit<32> queue_seq;  // this packet's number among those counted into its port's queue
    bit<16> l4_src_port;
    bit<16> l4_dst_port;
    telemetry_digest_t telemetry;
    policy_keys_t policy;
}

#endif
