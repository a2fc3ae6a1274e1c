/*
 * A stand-in bcryptprimitives.dll for running the Windows test builds under
 * Wine 8 (Debian 12), which has no such DLL. Rust's std imports ProcessPrng
 * from it (for HashMap keys and the like); without it every Rust program
 * fails to start under that Wine (exit 53: c0000135, DLL not found).
 *
 * For the harness's test runs only: `harness matrix` compiles it with
 * x86_64-w64-mingw32-gcc into target/matrix/_wine/ and installs it into the
 * system32 of the Wine prefix it runs the Windows rows in. It is never put
 * beside a built binary nor shipped: real Windows (8 and later) has the
 * real DLL.
 *
 * ProcessPrng(buffer, length) fills the buffer with random bytes and
 * returns TRUE; here the bytes come from RtlGenRandom (advapi32's
 * SystemFunction036), which Wine has, in chunks it accepts (ULONG lengths).
 */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T length)
{
    while (length > 0) {
        ULONG chunk = length > 0x10000000 ? 0x10000000 : (ULONG)length;
        if (!SystemFunction036(data, chunk))
            return FALSE;
        data += chunk;
        length -= chunk;
    }
    return TRUE;
}
