/* bench/bench_switch.py's traffic source: frames round-robin over raw sockets, as fast as
 * one core sends them (sendmmsg, 64 at a time), until killed.
 *
 *   blast FRAMES_FILE IFACE...
 *
 * FRAMES_FILE holds, per interface in order, a u32 count then count x (u32 length, bytes);
 * interface i sends its own frames in turn. A Python sender tops out near 400k frames/s on
 * this machine, below what the native data plane forwards; this one is not the bottleneck.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define BATCH 64

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: blast FRAMES_FILE IFACE...\n");
        return 2;
    }
    FILE *in = fopen(argv[1], "rb");
    if (!in) { perror(argv[1]); return 2; }
    int n_if = argc - 2;
    int *fds = calloc(n_if, sizeof *fds);
    uint32_t *counts = calloc(n_if, sizeof *counts);
    uint8_t ***frames = calloc(n_if, sizeof *frames);
    uint32_t **lens = calloc(n_if, sizeof *lens);
    for (int i = 0; i < n_if; i++) {
        if (fread(&counts[i], 4, 1, in) != 1 || counts[i] == 0) { fprintf(stderr, "bad frames file\n"); return 2; }
        frames[i] = calloc(counts[i], sizeof **frames);
        lens[i] = calloc(counts[i], sizeof **lens);
        for (uint32_t k = 0; k < counts[i]; k++) {
            if (fread(&lens[i][k], 4, 1, in) != 1) { fprintf(stderr, "bad frames file\n"); return 2; }
            frames[i][k] = malloc(lens[i][k]);
            if (fread(frames[i][k], 1, lens[i][k], in) != lens[i][k]) { fprintf(stderr, "short frame\n"); return 2; }
        }
        fds[i] = socket(AF_PACKET, SOCK_RAW, 0);
        struct sockaddr_ll addr = {.sll_family = AF_PACKET, .sll_ifindex = (int)if_nametoindex(argv[i + 2])};
        if (fds[i] < 0 || !addr.sll_ifindex || bind(fds[i], (struct sockaddr *)&addr, sizeof addr) < 0) {
            perror(argv[i + 2]);
            return 2;
        }
    }
    struct mmsghdr msgs[BATCH];
    struct iovec iov[BATCH];
    uint64_t k = 0;
    for (;;) {
        for (int i = 0; i < n_if; i++) {
            for (int b = 0; b < BATCH; b++, k++) {
                uint32_t j = (uint32_t)(k % counts[i]);
                iov[b] = (struct iovec){frames[i][j], lens[i][j]};
                memset(&msgs[b], 0, sizeof msgs[b]);
                msgs[b].msg_hdr.msg_iov = &iov[b];
                msgs[b].msg_hdr.msg_iovlen = 1;
            }
            /* a full socket buffer means the switch is the bottleneck: drop and go on */
            sendmmsg(fds[i], msgs, BATCH, MSG_DONTWAIT);
        }
    }
}
