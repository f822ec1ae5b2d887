// SPDX-License-Identifier: Apache-2.0 OR GPL-2.0
/* TCP Westwood+ for the kernel, as a BPF struct_ops congestion controller.
 *
 * The algorithm is the one of gearbox's QUIC controller (crates/gearbox-cc/src/westwood.rs),
 * after Mascolo, Casetti, Gerla, Sanadidi, Wang, "TCP Westwood: Bandwidth Estimation for
 * Enhanced Transport over Wireless Links" (MobiCom 2001) and Grieco & Mascolo, "Performance
 * evaluation and comparison of Westwood+, New Reno, and Vegas TCP congestion control"
 * (ACM CCR 34(2), 2004), §2:
 *   - growth is Reno's (the kernel's own tcp_reno_cong_avoid, called as a kfunc);
 *   - the bandwidth estimate BWE is sampled once per RTT (at least every 50 ms): bytes
 *     acknowledged in the interval over its length, then low-pass filtered,
 *     BWE <- 7/8 BWE + 1/8 sample (in slow start, where the rate doubles every RTT,
 *     BWE is the latest sample: the filter would trail it far behind);
 *   - after a loss, ssthresh = max(BWE x RTTmin, 2 segments) instead of Reno's halving,
 *     and cwnd = ssthresh when the recovery ends.
 * ACKs are counted as Westwood counts them: a cumulative ACK delivers the bytes it
 * covers; a duplicate ACK tells that one segment left the network, so it counts one MSS
 * at once, and a later cumulative ACK counts only what the duplicates did not already.
 *
 * Loaded and registered by crates/gearbox-bpf/src/westwood.rs under the name "westwood"
 * (the kernel ships no Westwood module here); then TCP_CONGESTION = "westwood" selects it
 * per socket, at accept or on a live connection.
 */
#include "kernel_types.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char _license[] SEC("license") = "Dual BSD/GPL";

/* The kernel's Reno, exported to BPF congestion controllers as kfuncs. */
extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;
extern __u32 tcp_reno_undo_cwnd(struct sock *sk) __ksym;

/* Shortest interval a bandwidth sample covers, us (Linux's Westwood uses 50 ms, so a
 * tiny RTT does not make samples of a handful of ACKs). */
#define MIN_SAMPLE_US 50000ULL
/* Smallest window after a loss, segments. */
#define MIN_WINDOW 2U

/* Per-connection state, kept in the socket's congestion-control area (at most 104 bytes). */
struct westwood {
	__u64 bwe;             /* filtered bandwidth estimate, bytes/s (0: no sample yet) */
	__u64 sample_start_us; /* start of the current sampling interval, us (tcp_mstamp) */
	__u64 sample_bytes;    /* bytes acknowledged in that interval */
	__u32 snd_una;         /* snd_una at the previous ACK */
	__u32 accounted;       /* bytes counted for duplicate ACKs and not yet acknowledged */
	__u32 rtt_us;          /* latest RTT sample, us (0: none yet) */
	__u32 rtt_min_us;      /* smallest RTT sample, us (0: none yet) */
};

static struct westwood *ca(struct sock *sk)
{
	return (struct westwood *)((struct inet_connection_sock *)sk)->icsk_ca_priv;
}

static struct tcp_sock *tcp(struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

/* BWE x RTTmin in segments, at least MIN_WINDOW; 0 when there is no estimate yet. */
static __u32 pipe_segments(struct sock *sk)
{
	struct westwood *w = ca(sk);
	struct tcp_sock *tp = tcp(sk);
	__u64 mss = tp->mss_cache ? tp->mss_cache : 1;
	__u64 segments;

	if (!w->bwe || !w->rtt_min_us)
		return 0;
	segments = w->bwe * w->rtt_min_us / 1000000ULL / mss;
	if (segments < MIN_WINDOW)
		segments = MIN_WINDOW;
	if (segments > 0xffffffffULL)
		segments = 0xffffffffULL;
	return (__u32)segments;
}

/* Adds acknowledged bytes to the interval and closes it once it is an RTT long. */
static void sample(struct sock *sk, __u32 bytes)
{
	struct westwood *w = ca(sk);
	__u64 now = tcp(sk)->tcp_mstamp;
	__u64 interval = w->rtt_us > MIN_SAMPLE_US ? w->rtt_us : MIN_SAMPLE_US;
	__u64 elapsed, rate;

	if (!w->sample_start_us)
		w->sample_start_us = now;
	w->sample_bytes += bytes;
	elapsed = now - w->sample_start_us;
	if (now < w->sample_start_us || elapsed < interval)
		return;
	rate = w->sample_bytes * 1000000ULL / elapsed;
	/* In slow start the rate doubles every RTT and the filter would trail it: the
	 * estimate is the latest sample there, filtered only once the rate is steady. */
	if (!w->bwe || tcp(sk)->snd_cwnd < tcp(sk)->snd_ssthresh)
		w->bwe = rate;
	else
		w->bwe = (7 * w->bwe + rate) / 8;
	w->sample_start_us = now;
	w->sample_bytes = 0;
}

/* Bytes this ACK tells have left the network (Westwood's ACK counting). */
static __u32 acked_bytes(struct sock *sk, bool slow_path)
{
	struct westwood *w = ca(sk);
	struct tcp_sock *tp = tcp(sk);
	__u32 mss = tp->mss_cache;
	__u32 cumulative = tp->snd_una - w->snd_una;

	w->snd_una = tp->snd_una;
	if (!slow_path)
		return cumulative;
	if (!cumulative) {
		/* A duplicate ACK: one segment arrived out of order. */
		w->accounted += mss;
		return mss;
	}
	if (cumulative > mss) {
		/* A cumulative ACK after duplicates: part of it was counted already. */
		if (w->accounted >= cumulative) {
			w->accounted -= cumulative;
			return mss;
		}
		cumulative -= w->accounted;
		w->accounted = 0;
	}
	return cumulative;
}

SEC("struct_ops")
void BPF_PROG(westwood_init, struct sock *sk)
{
	struct westwood *w = ca(sk);

	w->bwe = 0;
	w->sample_start_us = 0;
	w->sample_bytes = 0;
	w->snd_una = tcp(sk)->snd_una;
	w->accounted = 0;
	w->rtt_us = 0;
	w->rtt_min_us = 0;
}

SEC("struct_ops")
void BPF_PROG(westwood_pkts_acked, struct sock *sk, const struct ack_sample *s)
{
	struct westwood *w = ca(sk);
	__s32 rtt = s->rtt_us;

	if (rtt <= 0)
		return;
	w->rtt_us = (__u32)rtt;
	if (!w->rtt_min_us || (__u32)rtt < w->rtt_min_us)
		w->rtt_min_us = (__u32)rtt;
}

SEC("struct_ops")
void BPF_PROG(westwood_in_ack_event, struct sock *sk, __u32 flags)
{
	sample(sk, acked_bytes(sk, flags & CA_ACK_SLOWPATH));
}

SEC("struct_ops")
void BPF_PROG(westwood_cwnd_event, struct sock *sk, enum tcp_ca_event ev)
{
	struct westwood *w = ca(sk);
	struct tcp_sock *tp = tcp(sk);
	__u32 pipe;

	switch (ev) {
	case CA_EVENT_COMPLETE_CWR:
		/* Recovery is over: continue from the pipe the ACKs measured. */
		pipe = pipe_segments(sk);
		if (pipe) {
			tp->snd_ssthresh = pipe;
			tp->snd_cwnd = pipe;
		}
		break;
	case CA_EVENT_LOSS:
		/* A retransmission timeout: ssthresh from the pipe; the kernel sets cwnd to
		 * its loss window. The minimum RTT is measured afresh, as the path may have
		 * changed. */
		pipe = pipe_segments(sk);
		if (pipe)
			tp->snd_ssthresh = pipe;
		w->rtt_min_us = w->rtt_us;
		break;
	default:
		break;
	}
}

SEC("struct_ops")
__u32 BPF_PROG(westwood_ssthresh, struct sock *sk)
{
	__u32 pipe = pipe_segments(sk);
	__u32 half;

	if (pipe)
		return pipe;
	/* No estimate yet (a loss in the first RTT): Reno's halving. */
	half = tcp(sk)->snd_cwnd / 2;
	return half > MIN_WINDOW ? half : MIN_WINDOW;
}

SEC("struct_ops")
void BPF_PROG(westwood_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	tcp_reno_cong_avoid(sk, ack, acked);
}

SEC("struct_ops")
__u32 BPF_PROG(westwood_undo_cwnd, struct sock *sk)
{
	return tcp_reno_undo_cwnd(sk);
}

SEC(".struct_ops.link")
struct tcp_congestion_ops westwood = {
	.init = (void *)westwood_init,
	.pkts_acked = (void *)westwood_pkts_acked,
	.in_ack_event = (void *)westwood_in_ack_event,
	.cwnd_event = (void *)westwood_cwnd_event,
	.ssthresh = (void *)westwood_ssthresh,
	.cong_avoid = (void *)westwood_cong_avoid,
	.undo_cwnd = (void *)westwood_undo_cwnd,
	.name = "westwood",
};
