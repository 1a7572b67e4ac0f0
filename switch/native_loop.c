/* The native data plane's loop: ports -> parser + ingress -> traffic manager -> egress +
 * deparser -> ports, as switch/dataplane.py's Switch runs it, in C (issue 21).
 *
 * Appended to every generated program (switch/compile_c.py) so the pipeline functions
 * inline into it. One thread runs it (BMv2's "one core"): it sleeps in epoll until a port
 * has frames, the control side wakes it (a PacketOut, a stop) or the next queue departure
 * or delay-line release is due, so an idle switch takes no CPU. Frames come in batches
 * (recvmmsg, with the 802.1Q tag the kernel took out put back from PACKET_AUXDATA, as
 * switch/packet_io.py does) and leave in batches (sendmmsg, once per wake-up).
 *
 * The Python side (switch/native_dataplane.py) configures it, takes `ect_lock` around every
 * table swap (so a lookup never sees freed entries and each update applies at once), reads
 * registers, counters and statistics in place without stopping it, and drains two rings
 * the loop fills: digests (learn-list samples) and frames for the CPU port (PacketIn).
 *
 * Timestamps, queue metadata and the traffic manager follow switch/traffic_manager.py: a
 * packet's departure is fixed at enqueue, max(now, when the port finishes the previous
 * one); depth counts packets; arrivals to a full queue drop. What this loop does not do
 * (clones, resubmit, recirculate, multicast) the Python side refuses before it starts.
 */
#include <errno.h>
#include <linux/if_packet.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define ECT_MAX_PORTS 512
#define ECT_DROP_PORT 511
#define ECT_BATCH 64
#define ECT_MAX_FRAME (65536 + 64)
#define ECT_RING 4096          /* digests and PacketIns waiting for the Python side */
#define ECT_MAX_LEARN 32       /* fields per digest sample */
#define ECT_MAX_WAIT_NS 50000000LL

/* The v1model metadata slots the loop writes, -1 where the program lacks one (the order
 * of compiler.V1MODEL_SLOTS). */
enum {
    M_INGRESS_PORT, M_EGRESS_SPEC, M_EGRESS_PORT, M_INSTANCE_TYPE, M_PACKET_LENGTH,
    M_MCAST_GRP, M_EGRESS_RID, M_CHECKSUM_ERROR, M_PARSER_ERROR, M_PRIORITY,
    M_INGRESS_TS, M_EGRESS_TS, M_I_MCAST_GRP, M_I_EGRESS_RID, M_ENQ_TS, M_ENQ_QDEPTH,
    M_DEQ_TIMEDELTA, M_DEQ_QDEPTH, M_QID, M_COUNT
};

typedef struct ect_qpkt {
    struct ect_qpkt *next;
    int64_t due_ns;
    ect_pkt pkt;
    u64 *f;
    uint8_t *data;
    u64 len;
} ect_qpkt;

typedef struct {
    ect_qpkt *head, *tail;
    u64 depth;
    int64_t free_at_ns;
    /* read by the Python side */
    u64 enqueued, dropped;
} ect_queue;

typedef struct {
    int64_t depth_pkts;
    double rate_pps, rate_bps;  /* 0: unlimited */
    int64_t delay_ns;           /* the port's propagation delay (the "wire") */
} ect_shaping;

typedef struct {
    u64 rx, tx, dropped, errors, to_cpu, from_cpu, digests_lost, packet_ins_lost,
        unsupported, tx_errors;
    u64 per_port_tx[ECT_MAX_PORTS];
} ect_stats;

typedef struct {
    u64 learn_id, n;
    u64 values[ECT_MAX_LEARN];
} ect_digest;

typedef struct {
    uint8_t *data;
    u64 len;
    int port;
} ect_frame;

/* -- state (one switch per loaded copy of this object) ------------------------------------ */

ect_stats ect_dp_stats;
ect_queue ect_queues[ECT_MAX_PORTS];
ect_shaping ect_shape[ECT_MAX_PORTS];
static int port_fd[ECT_MAX_PORTS];
static int known[ECT_MAX_PORTS], n_known;  /* ports with a socket or a queue: what loops visit */
static uint8_t is_known[ECT_MAX_PORTS];
static ect_qpkt *wire_head[ECT_MAX_PORTS], *wire_tail[ECT_MAX_PORTS];
static int64_t meta[M_COUNT];
static const u64 *tmpl;
static int64_t n_slots_dp, cpu_port = -1, start_ns;
static int64_t learn_slots[256][ECT_MAX_LEARN + 1];  /* learn id -> [n, slots...] */
static int epfd = -1, wakefd = -1, notifyfd = -1;
static volatile int stopping;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static ect_digest digest_ring[ECT_RING];
static u64 digest_head, digest_tail;
static ect_frame cpu_ring[ECT_RING], inject_ring[ECT_RING];
static u64 cpu_head, cpu_tail, inject_head, inject_tail;

static struct mmsghdr tx_msgs[ECT_MAX_PORTS][ECT_BATCH];
static struct iovec tx_iov[ECT_MAX_PORTS][ECT_BATCH];
static uint8_t *tx_bufs[ECT_MAX_PORTS][ECT_BATCH];
static int tx_n[ECT_MAX_PORTS];
static int tx_dirty[ECT_MAX_PORTS], tx_dirty_n;

static inline void know(int port) {
    if (!is_known[port]) {
        is_known[port] = 1;
        known[n_known++] = port;
    }
}

void ect_lock(void) { pthread_mutex_lock(&lock); }
void ect_unlock(void) { pthread_mutex_unlock(&lock); }

static inline int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline u64 now_us(int64_t now) { return (u64)((now - start_ns) / 1000); }

static inline void set_meta(u64 *f, int which, u64 value) {
    if (meta[which] >= 0) f[meta[which]] = value;
}

static void notify(void) {
    u64 one = 1;
    if (notifyfd >= 0 && write(notifyfd, &one, sizeof one) < 0) { /* full: already pending */ }
}

/* -- configuration (the Python side, before ect_run) --------------------------------------- */

int ect_dp_init(const u64 *template_f, int64_t n_slots, const int64_t *meta_slots,
                int64_t cpu, int64_t start, int notify_fd) {
    tmpl = template_f;
    n_slots_dp = n_slots;
    memcpy(meta, meta_slots, sizeof meta);
    cpu_port = cpu;
    start_ns = start;
    notifyfd = notify_fd;
    for (int p = 0; p < ECT_MAX_PORTS; p++) {
        port_fd[p] = -1;
        ect_shape[p].depth_pkts = 64;
    }
    epfd = epoll_create1(EPOLL_CLOEXEC);
    wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (epfd < 0 || wakefd < 0) return -errno;
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = ECT_MAX_PORTS};
    return epoll_ctl(epfd, EPOLL_CTL_ADD, wakefd, &ev) < 0 ? -errno : 0;
}

int ect_dp_add_port(int64_t port, int fd) {
    if (port < 0 || port >= ECT_MAX_PORTS) return -EINVAL;
    port_fd[port] = fd;
    know((int)port);
    struct epoll_event ev = {.events = EPOLLIN, .data.u32 = (uint32_t)port};
    return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0 ? -errno : 0;
}

void ect_dp_learn_list(int64_t id, int64_t n, const int64_t *slots) {
    if (id < 0 || id >= 256 || n > ECT_MAX_LEARN) return;
    learn_slots[id][0] = n;
    for (int64_t i = 0; i < n; i++) learn_slots[id][i + 1] = slots[i];
}

static void wake(void) {
    u64 one = 1;
    if (write(wakefd, &one, sizeof one) < 0) { /* the counter is full: it is awake anyway */ }
}

void ect_dp_stop(void) {
    stopping = 1;
    wake();
}

/* -- rings shared with the Python side ------------------------------------------------------ */

int ect_dp_inject(int64_t port, const uint8_t *data, u64 len) {
    uint8_t *copy = malloc(len ? len : 1);
    if (!copy) return -ENOMEM;
    memcpy(copy, data, len);
    pthread_mutex_lock(&lock);
    if (inject_tail - inject_head >= ECT_RING) {
        pthread_mutex_unlock(&lock);
        free(copy);
        return -ENOBUFS;
    }
    inject_ring[inject_tail++ % ECT_RING] = (ect_frame){copy, len, (int)port};
    pthread_mutex_unlock(&lock);
    wake();
    return 0;
}

/* The next digest sample into *out; 0 when there is none. */
int ect_dp_next_digest(ect_digest *out) {
    pthread_mutex_lock(&lock);
    int got = digest_head != digest_tail;
    if (got) *out = digest_ring[digest_head++ % ECT_RING];
    pthread_mutex_unlock(&lock);
    return got;
}

/* The next frame for the CPU port into out (cap bytes): its length, -1 when there is none. */
int64_t ect_dp_next_packet_in(uint8_t *out, u64 cap) {
    pthread_mutex_lock(&lock);
    int64_t n = -1;
    if (cpu_head != cpu_tail) {
        ect_frame fr = cpu_ring[cpu_head++ % ECT_RING];
        n = (int64_t)(fr.len < cap ? fr.len : cap);
        memcpy(out, fr.data, (size_t)n);
        free(fr.data);
    }
    pthread_mutex_unlock(&lock);
    return n;
}

/* -- the traffic manager ---------------------------------------------------------------------- */

static inline int64_t service_ns(const ect_shaping *s, u64 length) {
    if (s->rate_bps > 0) return (int64_t)(length * 8.0 / s->rate_bps * 1e9);
    if (s->rate_pps > 0) return (int64_t)(1e9 / s->rate_pps);
    return 0;
}

static void enqueue(int port, ect_qpkt *q, int64_t now) {
    ect_queue *qu = &ect_queues[port];
    know(port);
    set_meta(q->f, M_ENQ_TS, now_us(now) & 0xFFFFFFFFULL);
    set_meta(q->f, M_ENQ_QDEPTH, qu->depth);
    if ((int64_t)qu->depth >= ect_shape[port].depth_pkts) {
        qu->dropped++;
        ect_dp_stats.dropped++;
        free(q);
        return;
    }
    int64_t departure = now > qu->free_at_ns ? now : qu->free_at_ns;
    qu->free_at_ns = departure + service_ns(&ect_shape[port], q->pkt.length);
    q->due_ns = departure;
    q->next = NULL;
    if (qu->tail) qu->tail->next = q; else qu->head = q;
    qu->tail = q;
    qu->depth++;
    qu->enqueued++;
}

/* -- ingress: a frame into the pipeline and a queue --------------------------------------------- */

static void ingress(int port, const uint8_t *frame, u64 len, int64_t now) {
    ect_qpkt *q = malloc(sizeof *q + n_slots_dp * sizeof(u64) + len);
    if (!q) { ect_dp_stats.errors++; return; }
    q->f = (u64 *)(q + 1);
    q->data = (uint8_t *)(q->f + n_slots_dp);
    q->len = len;
    memcpy(q->f, tmpl, n_slots_dp * sizeof(u64));
    memcpy(q->data, frame, len);
    memset(&q->pkt, 0, sizeof q->pkt);
    q->pkt.data = q->data;
    q->pkt.len = q->pkt.length = len;
    u64 *f = q->f;
    set_meta(f, M_INGRESS_PORT, (u64)port);
    set_meta(f, M_INSTANCE_TYPE, 0);
    set_meta(f, M_PACKET_LENGTH, len);
    set_meta(f, M_INGRESS_TS, now_us(now));
    ect_parse(f, &q->pkt);
    set_meta(f, M_PARSER_ERROR, q->pkt.error);
    set_meta(f, M_CHECKSUM_ERROR, q->pkt.cksum_error);
    if (!q->pkt.fault) ect_ingress(f, &q->pkt);
    if (q->pkt.fault) { ect_dp_stats.errors++; free(q); return; }
    q->pkt.exit = 0;
    u64 id = q->pkt.learn_id;
    if (id && id < 256 && learn_slots[id][0]) {
        if (digest_tail - digest_head >= ECT_RING) {
            ect_dp_stats.digests_lost++;
        } else {
            ect_digest *d = &digest_ring[digest_tail++ % ECT_RING];
            d->learn_id = id;
            d->n = (u64)learn_slots[id][0];
            for (u64 i = 0; i < d->n; i++) d->values[i] = f[learn_slots[id][i + 1]];
            notify();
        }
    }
    if (meta[M_MCAST_GRP] >= 0 && f[meta[M_MCAST_GRP]]) {  /* multicast: refused, counted */
        ect_dp_stats.unsupported++;
        free(q);
        return;
    }
    u64 spec = meta[M_EGRESS_SPEC] >= 0 ? f[meta[M_EGRESS_SPEC]] : ECT_DROP_PORT;
    if (spec == ECT_DROP_PORT || spec >= ECT_MAX_PORTS) {
        ect_dp_stats.dropped++;
        free(q);
        return;
    }
    set_meta(f, M_INSTANCE_TYPE, 0);
    enqueue((int)spec, q, now);
}

/* -- egress: a departure through the egress pipeline to a port, the CPU or the wire ------------- */

static void flush_port(int port) {
    int n = tx_n[port], sent = 0;
    while (sent < n) {
        int r = sendmmsg(port_fd[port], &tx_msgs[port][sent], (unsigned)(n - sent), MSG_DONTWAIT);
        if (r <= 0) {  /* ENOBUFS, ENETDOWN: lost, like on a wire */
            ect_dp_stats.tx_errors += (u64)(n - sent);
            break;
        }
        ect_dp_stats.tx += (u64)r;
        ect_dp_stats.per_port_tx[port] += (u64)r;
        sent += r;
    }
    for (int i = 0; i < n; i++) free(tx_bufs[port][i]);
    tx_n[port] = 0;
}

static void flush_all(void) {
    for (int i = 0; i < tx_dirty_n; i++) flush_port(tx_dirty[i]);
    tx_dirty_n = 0;
}

static void send_frame(int port, uint8_t *buf, u64 len) {
    if (tx_n[port] == ECT_BATCH) flush_port(port);
    int i = tx_n[port]++;
    if (i == 0) tx_dirty[tx_dirty_n++] = port;
    tx_bufs[port][i] = buf;
    tx_iov[port][i] = (struct iovec){buf, len};
    memset(&tx_msgs[port][i], 0, sizeof tx_msgs[port][i]);
    tx_msgs[port][i].msg_hdr.msg_iov = &tx_iov[port][i];
    tx_msgs[port][i].msg_hdr.msg_iovlen = 1;
}

static void transmit(int port, uint8_t *buf, u64 len, int64_t now) {
    if (port == cpu_port) {
        ect_dp_stats.to_cpu++;
        if (cpu_tail - cpu_head >= ECT_RING) {
            ect_dp_stats.packet_ins_lost++;
            free(buf);
            return;
        }
        cpu_ring[cpu_tail++ % ECT_RING] = (ect_frame){buf, len, port};
        notify();
        return;
    }
    if (port_fd[port] < 0) {
        ect_dp_stats.dropped++;
        free(buf);
        return;
    }
    if (ect_shape[port].delay_ns > 0) {  /* on the wire: a FIFO per port (constant delay) */
        ect_qpkt *w = malloc(sizeof *w);
        if (!w) { free(buf); ect_dp_stats.errors++; return; }
        w->next = NULL;
        w->due_ns = now + ect_shape[port].delay_ns;
        w->data = buf;
        w->len = len;
        if (wire_tail[port]) wire_tail[port]->next = w; else wire_head[port] = w;
        wire_tail[port] = w;
        return;
    }
    send_frame(port, buf, len);
}

static void egress(int port, ect_qpkt *q, u64 left, int64_t now) {
    u64 *f = q->f;
    u64 t = now_us(now);
    set_meta(f, M_EGRESS_TS, t);
    if (meta[M_DEQ_QDEPTH] >= 0) {
        u64 enq = meta[M_ENQ_TS] >= 0 ? f[meta[M_ENQ_TS]] : 0;
        set_meta(f, M_DEQ_TIMEDELTA, ((t & 0xFFFFFFFFULL) - enq) & 0xFFFFFFFFULL);
        set_meta(f, M_DEQ_QDEPTH, left);
    }
    set_meta(f, M_EGRESS_PORT, (u64)port);
    set_meta(f, M_EGRESS_SPEC, 0);
    set_meta(f, M_PACKET_LENGTH, q->pkt.length);
    ect_egress(f, &q->pkt);
    if (q->pkt.fault) { ect_dp_stats.errors++; free(q); return; }
    if (meta[M_EGRESS_SPEC] >= 0 && f[meta[M_EGRESS_SPEC]] == ECT_DROP_PORT) {
        ect_dp_stats.dropped++;
        free(q);
        return;
    }
    u64 cap = q->len + 512;
    uint8_t *out = malloc(cap);
    int64_t n = out ? ect_deparse(f, &q->pkt, out, cap) : -1;
    if (n < 0) { free(out); ect_dp_stats.errors++; free(q); return; }
    if (q->pkt.truncate && (u64)n > q->pkt.truncate) n = (int64_t)q->pkt.truncate;
    free(q);
    transmit(port, out, (u64)n, now);
}

/* Egress every queued packet whose departure time has come, earliest first; the next
 * departure after that (INT64_MAX: none). */
static int64_t departures(int64_t now) {
    for (;;) {
        int best = -1;
        int64_t best_due = INT64_MAX;
        for (int i = 0; i < n_known; i++) {
            int p = known[i];
            ect_qpkt *h = ect_queues[p].head;
            if (h && h->due_ns < best_due) { best_due = h->due_ns; best = p; }
        }
        if (best < 0 || best_due > now) return best_due;
        ect_queue *qu = &ect_queues[best];
        ect_qpkt *q = qu->head;
        qu->head = q->next;
        if (!qu->head) qu->tail = NULL;
        qu->depth--;
        egress(best, q, qu->depth, now);
    }
}

static int64_t release_wire(int64_t now) {
    int64_t next = INT64_MAX;
    for (int i = 0; i < n_known; i++) {
        int p = known[i];
        ect_qpkt *w;
        while ((w = wire_head[p]) && w->due_ns <= now) {
            wire_head[p] = w->next;
            if (!wire_head[p]) wire_tail[p] = NULL;
            send_frame(p, w->data, w->len);
            free(w);
        }
        if (wire_head[p] && wire_head[p]->due_ns < next) next = wire_head[p]->due_ns;
    }
    return next;
}

/* -- receiving: a batch from one port ------------------------------------------------------------ */

static uint8_t rx_buf[ECT_BATCH][ECT_MAX_FRAME + 4];
static uint8_t rx_ctl[ECT_BATCH][CMSG_SPACE(sizeof(struct tpacket_auxdata))];
static struct mmsghdr rx_msgs[ECT_BATCH];
static struct iovec rx_iov[ECT_BATCH];

/* Put back the 802.1Q tag the kernel took out (VLAN offload), as packet_io.with_vlan_tag. */
static u64 with_vlan_tag(uint8_t *frame, u64 len, struct msghdr *h) {
    for (struct cmsghdr *c = CMSG_FIRSTHDR(h); c; c = CMSG_NXTHDR(h, c)) {
        if (c->cmsg_level != SOL_PACKET || c->cmsg_type != PACKET_AUXDATA) continue;
        struct tpacket_auxdata aux;
        memcpy(&aux, CMSG_DATA(c), sizeof aux);
        if (!(aux.tp_status & TP_STATUS_VLAN_VALID) || len < 12) return len;
        uint16_t tpid = (aux.tp_status & TP_STATUS_VLAN_TPID_VALID) ? aux.tp_vlan_tpid : 0x8100;
        memmove(frame + 16, frame + 12, len - 12);
        frame[12] = tpid >> 8; frame[13] = tpid & 0xFF;
        frame[14] = aux.tp_vlan_tci >> 8; frame[15] = aux.tp_vlan_tci & 0xFF;
        return len + 4;
    }
    return len;
}

static void receive_port(int port) {
    for (int i = 0; i < ECT_BATCH; i++) {
        rx_iov[i] = (struct iovec){rx_buf[i], ECT_MAX_FRAME};
        memset(&rx_msgs[i], 0, sizeof rx_msgs[i]);
        rx_msgs[i].msg_hdr.msg_iov = &rx_iov[i];
        rx_msgs[i].msg_hdr.msg_iovlen = 1;
        rx_msgs[i].msg_hdr.msg_control = rx_ctl[i];
        rx_msgs[i].msg_hdr.msg_controllen = sizeof rx_ctl[i];
    }
    int n = recvmmsg(port_fd[port], rx_msgs, ECT_BATCH, MSG_DONTWAIT, NULL);
    for (int i = 0; i < n; i++) {
        ect_dp_stats.rx++;
        u64 len = with_vlan_tag(rx_buf[i], rx_msgs[i].msg_len, &rx_msgs[i].msg_hdr);
        int64_t now = mono_ns();
        ingress(port, rx_buf[i], len, now);
        departures(now);  /* as BMv2's egress thread would: an idle port passes it at once */
    }
}

/* -- the loop --------------------------------------------------------------------------------- */

int ect_dp_run(void) {
    struct epoll_event events[64];
    while (!stopping) {  /* a stop asked before the loop started holds: it never runs */
        int64_t now = mono_ns();
        pthread_mutex_lock(&lock);
        int64_t due = departures(now);
        int64_t wire = release_wire(now);
        flush_all();
        pthread_mutex_unlock(&lock);
        if (wire < due) due = wire;
        int64_t wait = due == INT64_MAX ? ECT_MAX_WAIT_NS : due - mono_ns();
        if (wait > ECT_MAX_WAIT_NS) wait = ECT_MAX_WAIT_NS;
        if (wait < 0) wait = 0;
        struct timespec ts = {wait / 1000000000LL, wait % 1000000000LL};
        int n = epoll_pwait2(epfd, events, 64, &ts, NULL);
        if (n < 0 && errno != EINTR) return -errno;
        pthread_mutex_lock(&lock);
        for (int i = 0; i < n; i++) {
            uint32_t p = events[i].data.u32;
            if (p == ECT_MAX_PORTS) {
                u64 count;
                if (read(wakefd, &count, sizeof count) < 0) { /* drained already */ }
                continue;
            }
            receive_port((int)p);
        }
        while (inject_head != inject_tail) {
            ect_frame fr = inject_ring[inject_head++ % ECT_RING];
            ect_dp_stats.from_cpu++;
            now = mono_ns();
            ingress(fr.port, fr.data, fr.len, now);
            free(fr.data);
            departures(now);
        }
        flush_all();
        pthread_mutex_unlock(&lock);
    }
    return 0;
}

/* Free whatever is still queued or on the wire (after ect_dp_run returned). */
void ect_dp_close(void) {
    pthread_mutex_lock(&lock);
    for (int p = 0; p < ECT_MAX_PORTS; p++) {
        for (ect_qpkt *q = ect_queues[p].head, *nx; q; q = nx) { nx = q->next; free(q); }
        for (ect_qpkt *w = wire_head[p], *nx; w; w = nx) { nx = w->next; free(w->data); free(w); }
        ect_queues[p].head = ect_queues[p].tail = NULL;
        ect_queues[p].depth = 0;
        wire_head[p] = wire_tail[p] = NULL;
    }
    while (inject_head != inject_tail) free(inject_ring[inject_head++ % ECT_RING].data);
    while (cpu_head != cpu_tail) free(cpu_ring[cpu_head++ % ECT_RING].data);
    pthread_mutex_unlock(&lock);
    if (epfd >= 0) close(epfd);
    if (wakefd >= 0) close(wakefd);
    epfd = wakefd = -1;
}
