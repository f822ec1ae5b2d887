/* The few kernel types gearbox's BPF programs read, declared for CO-RE.
 *
 * Why not the usual vmlinux.h: dumped from a kernel's BTF it is about 135,000 lines,
 * and generating it at build time would tie the build to the build machine's kernel.
 * With `preserve_access_index` every field access below becomes a BTF relocation that
 * libbpf resolves against the running kernel's own layout when the program loads, so
 * only the names and types of the fields used have to be right here, not their
 * offsets or the rest of each struct. A field that the running kernel lacks fails the
 * load with libbpf naming it.
 */
#ifndef GEARBOX_KERNEL_TYPES_H
#define GEARBOX_KERNEL_TYPES_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef int __s32;
typedef unsigned long long __u64;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef _Bool bool;
enum { false = 0, true = 1 };

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

struct sock {
};

struct inet_connection_sock {
	/* Room the kernel keeps in every socket for its congestion controller's state
	 * (ICSK_CA_PRIV_SIZE). */
	__u64 icsk_ca_priv[13];
};

struct tcp_sock {
	__u32 snd_una;      /* first byte not yet acknowledged */
	__u32 snd_cwnd;     /* congestion window, segments */
	__u32 snd_ssthresh; /* slow-start threshold, segments */
	__u32 mss_cache;    /* current effective MSS, bytes */
	__u64 tcp_mstamp;   /* time of the latest ACK processing, us */
};

struct ack_sample {
	__u32 pkts_acked;
	__s32 rtt_us;
	__u32 in_flight;
};

struct rate_sample;
union tcp_cc_info;

enum tcp_ca_event {
	CA_EVENT_TX_START = 0,
	CA_EVENT_CWND_RESTART = 1,
	CA_EVENT_COMPLETE_CWR = 2,
	CA_EVENT_LOSS = 3,
	CA_EVENT_ECN_NO_CE = 4,
	CA_EVENT_ECN_IS_CE = 5,
};

enum tcp_ca_ack_event_flags {
	CA_ACK_SLOWPATH = 1,
	CA_ACK_WIN_UPDATE = 2,
	CA_ACK_ECE = 4,
};

/* libbpf matches this struct's members with the kernel's by name. */
struct tcp_congestion_ops {
	__u32 (*ssthresh)(struct sock *sk);
	void (*cong_avoid)(struct sock *sk, __u32 ack, __u32 acked);
	void (*set_state)(struct sock *sk, __u8 new_state);
	void (*cwnd_event)(struct sock *sk, enum tcp_ca_event ev);
	void (*in_ack_event)(struct sock *sk, __u32 flags);
	void (*pkts_acked)(struct sock *sk, const struct ack_sample *sample);
	__u32 (*undo_cwnd)(struct sock *sk);
	void (*init)(struct sock *sk);
	void (*release)(struct sock *sk);
	char name[16];
	__u32 flags;
};

#pragma clang attribute pop

#endif
