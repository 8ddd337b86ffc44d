// Marks and ranges through an NVTX library (the fake loader in
// tests/fixtures/cuda), which finds its tool via NVTX_INJECTION64_PATH.
#include <stdio.h>
#include <string.h>

#include "fake_nvtx.h"

static nvtxEventAttributes_t ascii_attr(const char* msg) {
    nvtxEventAttributes_t a;
    memset(&a, 0, sizeof(a));
    a.version = 2;
    a.size = sizeof(a);
    a.messageType = MSMS_NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = msg;
    return a;
}

int main() {
    nvtxMarkA("hello");
    nvtxRangeId_t step = nvtxRangeStartA("step start");
    int outer = nvtxRangePushA("outer");
    nvtxEventAttributes_t inner_attr = ascii_attr("inner");
    int inner = nvtxRangePushEx(&inner_attr);
    int popped_inner = nvtxRangePop();
    int popped_outer = nvtxRangePop();
    nvtxRangeEnd(step);
    nvtxEventAttributes_t ex = ascii_attr("ex mark");
    nvtxMarkEx(&ex);
    nvtxEventAttributes_t reg;
    memset(&reg, 0, sizeof(reg));
    reg.version = 2;
    reg.size = sizeof(reg);
    reg.messageType = MSMS_NVTX_MESSAGE_TYPE_REGISTERED;
    reg.message.registered = nvtxDomainRegisterStringA(nullptr, "registered mark");
    nvtxDomainMarkEx(nullptr, &reg);
    nvtxMarkW(L"wide mark");
    int extra_pop = nvtxRangePop();
    printf("levels %d %d %d %d %d step_id_nonzero=%d\n", outer, inner, popped_inner, popped_outer, extra_pop,
           step != 0);
    return 0;
}
