/*
 * mstx memory-pool domains as the frameworks use them: one heap and one
 * block per domain on device 0 — atb (ATB), mindsporeMemPool (MINDSPORE),
 * ptaWorkspace (PTA_WORKSPACE), msleaks (the older name of ptaCaching: PTA)
 * — each block registered and then unregistered by handle; a domain that is
 * not a pool ("myDomain") gets a mark and a range. Prints each block.
 */
#include <stdio.h>

#include <mstx/ms_tools_ext.h>

static char arena[4][1 << 16] __attribute__((aligned(4096)));

int main(void) {
    const char* names[4] = {"atb", "mindsporeMemPool", "ptaWorkspace", "msleaks"};
    for (int i = 0; i < 4; ++i) {
        mstxDomainHandle_t d = mstxDomainCreateA(names[i]);
        mstxMemVirtualRangeDesc_t heap_range = {0, arena[i], sizeof(arena[i])};
        mstxMemHeapDesc_t heap_desc = {MSTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR, MSTX_MEM_TYPE_VIRTUAL_ADDRESS,
                                       &heap_range};
        mstxMemHeapHandle_t heap = mstxMemHeapRegister(d, &heap_desc);
        mstxMemVirtualRangeDesc_t block = {0, arena[i] + 4096, 1024u * (i + 1)};
        mstxMemRegionHandle_t handle = NULL;
        mstxMemRegionsRegisterBatch_t reg = {heap, MSTX_MEM_TYPE_VIRTUAL_ADDRESS, 1, &block, &handle};
        mstxMemRegionsRegister(d, &reg);
        mstxMemRegionRef_t ref;
        ref.refType = MSTX_MEM_REGION_REF_TYPE_HANDLE;
        ref.handle = handle;
        mstxMemRegionsUnregisterBatch_t unreg = {1, &ref};
        mstxMemRegionsUnregister(d, &unreg);
        mstxMemHeapUnregister(d, heap);
        printf("%s block %p\n", names[i], (void*)(arena[i] + 4096));
    }
    mstxDomainHandle_t mine = mstxDomainCreateA("myDomain");
    mstxDomainMarkA(mine, "domain mark", NULL);
    mstxRangeId id = mstxDomainRangeStartA(mine, "domain range", NULL);
    mstxDomainRangeEnd(mine, id);
    uint64_t tool = 0;
    mstxGetToolId(&tool);
    printf("tool 0x%llx\n", (unsigned long long)tool);
    return 0;
}
