/*
 * ml_k_add_sse2: y[i] += x[i] for i in [0, n), SSE2, System V x86-64 ABI.
 *
 *     void ml_k_add_sse2(float *y, const float *x, size_t n);
 *     rdi = y, rsi = x, rdx = n
 *
 * The `asm` feature's sample kernel (DESIGN.md §3, ASM=1): it replaces the Rust
 * sse2 `add` with the same meaning, proving that a hand-written .S can stand
 * in for a kernel. Unaligned loads (movups), four floats per step, then a
 * scalar tail; the sums are the same IEEE single additions as the scalar
 * reference, so results are bit-identical.
 */
    .text
    .globl  ml_k_add_sse2
    .type   ml_k_add_sse2, @function
    .p2align 4
ml_k_add_sse2:
    xorl    %eax, %eax              /* i = 0 */
    movq    %rdx, %rcx
    andq    $-4, %rcx               /* n rounded down to whole vectors */
    jz      2f
1:
    movups  (%rdi,%rax,4), %xmm0
    movups  (%rsi,%rax,4), %xmm1
    addps   %xmm1, %xmm0
    movups  %xmm0, (%rdi,%rax,4)
    addq    $4, %rax
    cmpq    %rcx, %rax
    jb      1b
2:
    cmpq    %rdx, %rax
    jae     4f
3:
    movss   (%rdi,%rax,4), %xmm0
    addss   (%rsi,%rax,4), %xmm0
    movss   %xmm0, (%rdi,%rax,4)
    incq    %rax
    cmpq    %rdx, %rax
    jb      3b
4:
    ret
    .size   ml_k_add_sse2, .-ml_k_add_sse2
