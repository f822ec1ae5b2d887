// SPDX-License-Identifier: Apache-2.0 OR GPL-2.0
/* TCP WISE's initial window per client cluster for kernel TCP (TCP WISE §IV-A,
 * Connection Manager), as a BPF sock_ops program.
 *
 * The kernel lets a BPF program set a connection's initial congestion window
 * (bpf_setsockopt TCP_BPF_IW) only before the connection has sent any data, and a
 * value set at connect time is overwritten, so the draw happens when a passive
 * connection is established (BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB), before the edge's
 * accept() returns and long before it writes its first byte. For each connection to
 * the edge's port in the edge's network namespace:
 *   1. the client address is looked up in an LPM trie (IPv4 and IPv6 maps, filled by
 *      the edge from the Cwnd Table for the current hour), else the "others" entry;
 *   2. one IW of the entry's set is drawn: the first (α) with the entry's chance of α,
 *      each of the others with an equal share of the rest (a set of two: α or β; the
 *      fast start's set of five, TCP WISE §IV-C3, at chance_alpha 0.2: each 0.2);
 *   3. TCP_BPF_IW is set, and the draw is stored under the socket's cookie, where the
 *      edge reads it back for the connection's records (and deletes it).
 * Loaded and filled by crates/gearbox-bpf/src/iw.rs.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

char _license[] SEC("license") = "Dual BSD/GPL";

#define AF_INET 2
#define AF_INET6 10
#define SOL_TCP 6
#define TCP_BPF_IW 1001
#define MAX_SET 8               /* the most IWs of one entry (gearbox_gears::tcpwise::MAX_SET) */
#define CHANCE_ONE 1000000

/* One table entry as the kernel holds it. */
struct iw_entry {
	__u32 iw[MAX_SET];      /* the set under test, packets: iw[0] is alpha */
	__u32 count;            /* IWs in the set, 2..MAX_SET; 0: no entry (the default IW) */
	__u32 chance_alpha;     /* probability of iw[0], in 1/CHANCE_ONE */
	__u32 prefixlen;        /* of the matched prefix (for the record) */
	__u8 addr[16];          /* the prefix's address, network order (IPv4: first 4) */
	__u32 family;           /* AF_INET or AF_INET6; 0 for "others" */
};

struct key4 {
	__u32 prefixlen;
	__u8 addr[4];
};

struct key6 {
	__u32 prefixlen;
	__u8 addr[16];
};

/* What one connection drew. */
struct iw_draw {
	struct iw_entry entry;
	__u32 iw;
	__s32 setsockopt_result;
};

/* Which connections are the edge's. */
struct iw_config {
	__u64 netns_cookie;     /* the edge's network namespace */
	__u32 port;             /* the edge's TCP port, host order */
	__u32 enabled;
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, struct key4);
	__type(value, struct iw_entry);
} prefixes_v4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, struct key6);
	__type(value, struct iw_entry);
} prefixes_v6 SEC(".maps");

/* Index 0: the "others" entry (count = 0: none, the kernel's default IW). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct iw_entry);
} others SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct iw_config);
} config SEC(".maps");

/* Socket cookie -> draw; LRU so that draws the edge never reads (a connection that
 * died before accept) cannot fill it. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct iw_draw);
} draws SEC(".maps");

static __always_inline struct iw_entry *lookup(struct bpf_sock_ops *skops)
{
	__u32 zero = 0;
	struct iw_entry *e = 0;

	if (skops->family == AF_INET) {
		struct key4 k = { .prefixlen = 32 };
		__u32 ip = skops->remote_ip4;

		__builtin_memcpy(k.addr, &ip, 4);
		e = bpf_map_lookup_elem(&prefixes_v4, &k);
	} else if (skops->family == AF_INET6) {
		__u32 w0 = skops->remote_ip6[0], w1 = skops->remote_ip6[1];
		__u32 w2 = skops->remote_ip6[2], w3 = skops->remote_ip6[3];

		if (w0 == 0 && w1 == 0 && w2 == bpf_htonl(0xffff)) {
			/* An IPv4-mapped client matches IPv4 prefixes. */
			struct key4 k = { .prefixlen = 32 };

			__builtin_memcpy(k.addr, &w3, 4);
			e = bpf_map_lookup_elem(&prefixes_v4, &k);
		} else {
			struct key6 k = { .prefixlen = 128 };

			__builtin_memcpy(k.addr, &w0, 4);
			__builtin_memcpy(k.addr + 4, &w1, 4);
			__builtin_memcpy(k.addr + 8, &w2, 4);
			__builtin_memcpy(k.addr + 12, &w3, 4);
			e = bpf_map_lookup_elem(&prefixes_v6, &k);
		}
	}
	if (!e)
		e = bpf_map_lookup_elem(&others, &zero);
	return e;
}

SEC("sockops")
int gearbox_iw(struct bpf_sock_ops *skops)
{
	__u32 zero = 0;
	struct iw_config *cfg;
	struct iw_entry *e;
	struct iw_draw draw = {};
	__u64 cookie;
	__u32 r, count, idx;
	int iw;

	if (skops->op != BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB)
		return 1;
	cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg || !cfg->enabled || skops->local_port != cfg->port)
		return 1;
	if (bpf_get_netns_cookie(skops) != cfg->netns_cookie)
		return 1;
	e = lookup(skops);
	if (!e || !e->count)
		return 1;
	draw.entry = *e;
	count = e->count;
	if (count > MAX_SET)
		count = MAX_SET;
	r = bpf_get_prandom_u32() % CHANCE_ONE;
	if (r < e->chance_alpha || count < 2) {
		idx = 0;
	} else {
		/* The others share the rest equally: r - chance is uniform in
		 * [0, CHANCE_ONE - chance), cut into count - 1 equal parts. */
		idx = 1 + (__u32)(((__u64)(r - e->chance_alpha) * (count - 1)) /
				  (CHANCE_ONE - e->chance_alpha));
		if (idx >= count)
			idx = count - 1;
	}
	/* idx < count <= MAX_SET already; the mask is the bound the verifier sees, and the
	 * empty asm keeps clang from dropping it as redundant. */
	asm volatile("" : "+r"(idx));
	idx &= MAX_SET - 1;
	iw = e->iw[idx];
	draw.iw = iw;
	draw.setsockopt_result = bpf_setsockopt(skops, SOL_TCP, TCP_BPF_IW, &iw, sizeof(iw));
	cookie = bpf_get_socket_cookie(skops);
	bpf_map_update_elem(&draws, &cookie, &draw, BPF_ANY);
	return 1;
}
