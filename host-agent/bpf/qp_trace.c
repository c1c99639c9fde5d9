// SPDX-License-Identifier: GPL-2.0
// hawkmesh service tracing: kprobes on the kernel verbs that connect and destroy queue
// pairs (Linux drivers/infiniband/core/verbs.c), reporting each connected QP's 5-tuple
// material to the host agent through a ring buffer (host-agent/src/ebpf.rs loads this with
// aya and fills in the offsets below from the running kernel's BTF).
//
// Built by host-agent/build.rs with `clang -target bpf -O2` (feature `ebpf`); no kernel or
// libbpf headers: the few types and helpers are declared here (include/uapi/linux/bpf.h
// gives the helper numbers, arch/x86/include/asm/ptrace.h the register layout).

typedef unsigned char __u8;
typedef unsigned int __u32;
typedef unsigned long long __u64;

#if !defined(__TARGET_ARCH_x86)
#error "hawkmesh qp_trace.c: only x86-64 register layouts are written here"
#endif

// arch/x86/include/asm/ptrace.h struct pt_regs (x86-64).
struct pt_regs {
	unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8, ax, cx, dx, si, di;
	unsigned long orig_ax, ip, cs, flags, sp, ss;
};

// include/uapi/linux/bpf.h helper ids.
static long (*bpf_probe_read_kernel)(void *dst, __u32 size, const void *src) = (void *)113;
static long (*bpf_ringbuf_output)(void *ringbuf, void *data, __u64 size, __u64 flags) = (void *)130;

// A legacy map definition (aya reads the `maps` section): BPF_MAP_TYPE_RINGBUF = 27.
struct bpf_map_def {
	__u32 type, key_size, value_size, max_entries, map_flags;
};
__attribute__((section("maps"), used)) struct bpf_map_def EVENTS = {
	.type = 27,
	.max_entries = 1 << 16,
};

// Offsets in this kernel's structures, set at load time from BTF (0xFFFF: unknown).
volatile const __u32 OFF_QP_NUM = 0xFFFF;       // struct ib_qp.qp_num
volatile const __u32 OFF_ATTR_STATE = 0xFFFF;   // struct ib_qp_attr.qp_state
volatile const __u32 OFF_ATTR_DEST_QPN = 0xFFFF; // struct ib_qp_attr.dest_qp_num
volatile const __u32 OFF_ATTR_DGID = 0xFFFF;    // struct ib_qp_attr.ah_attr.grh.dgid
volatile const __u32 OFF_ATTR_FLOW_LABEL = 0xFFFF; // struct ib_qp_attr.ah_attr.grh.flow_label

// include/rdma/ib_verbs.h: enum ib_qp_state IB_QPS_RTR, enum ib_qp_attr_mask bits.
#define IB_QPS_RTR 2
#define IB_QP_STATE (1 << 0)
#define IB_QP_AV (1 << 7)
#define IB_QP_DEST_QPN (1 << 20)

#define EVENT_CONNECT 1
#define EVENT_DESTROY 2

// What user space reads (host-agent/src/ebpf.rs `QpEvent::parse`), 32 bytes.
struct event {
	__u32 kind;
	__u32 qpn;
	__u32 dest_qpn;
	__u32 flow_label;
	__u8 dgid[16];
};

// int ib_modify_qp_with_udata(struct ib_qp *ib_qp, struct ib_qp_attr *attr, int attr_mask,
//                             struct ib_udata *udata)
__attribute__((section("kprobe/ib_modify_qp_with_udata"), used)) int qp_modify(struct pt_regs *ctx)
{
	const char *qp = (const char *)ctx->di;
	const char *attr = (const char *)ctx->si;
	__u32 mask = (__u32)ctx->dx;
	__u32 state = 0;
	struct event e = {};

	if ((mask & (IB_QP_STATE | IB_QP_AV | IB_QP_DEST_QPN)) !=
	    (IB_QP_STATE | IB_QP_AV | IB_QP_DEST_QPN))
		return 0;
	if (OFF_ATTR_STATE == 0xFFFF)
		return 0;
	bpf_probe_read_kernel(&state, sizeof(state), attr + OFF_ATTR_STATE);
	if (state != IB_QPS_RTR)
		return 0;
	e.kind = EVENT_CONNECT;
	bpf_probe_read_kernel(&e.qpn, sizeof(e.qpn), qp + OFF_QP_NUM);
	bpf_probe_read_kernel(&e.dest_qpn, sizeof(e.dest_qpn), attr + OFF_ATTR_DEST_QPN);
	bpf_probe_read_kernel(&e.flow_label, sizeof(e.flow_label), attr + OFF_ATTR_FLOW_LABEL);
	bpf_probe_read_kernel(&e.dgid, sizeof(e.dgid), attr + OFF_ATTR_DGID);
	bpf_ringbuf_output(&EVENTS, &e, sizeof(e), 0);
	return 0;
}

// int ib_destroy_qp_user(struct ib_qp *qp, struct ib_udata *udata)
__attribute__((section("kprobe/ib_destroy_qp_user"), used)) int qp_destroy(struct pt_regs *ctx)
{
	const char *qp = (const char *)ctx->di;
	struct event e = {};

	if (OFF_QP_NUM == 0xFFFF)
		return 0;
	e.kind = EVENT_DESTROY;
	bpf_probe_read_kernel(&e.qpn, sizeof(e.qpn), qp + OFF_QP_NUM);
	bpf_ringbuf_output(&EVENTS, &e, sizeof(e), 0);
	return 0;
}

char LICENSE[] __attribute__((section("license"), used)) = "GPL";
