// The plugin ABI's layout guard (sdk/README.md, "ABI rules"). Every offset of
// ABI 1.0 is pinned with static_assert, so that removing, reordering or
// retyping a field fails the build, not a customer's plugin at run time.
// Appending a field is allowed: it must bump MSMS_ABI_MINOR and add a line to
// the size table below for the new minor (the old sizes stay: the host reads
// an older plugin's descriptor only up to its struct_size).
// Targets: LP64 Linux (x86_64, aarch64).
#include <doctest/doctest.h>

#include <cstddef>
#include <cstring>

#include <msmemscope/abi.h>

static_assert(sizeof(void*) == 8, "the pinned layout is LP64's");
static_assert(MSMS_ABI_MAJOR == 1u, "a new major version needs a new layout table");
static_assert(MSMS_ERROR_MESSAGE_SIZE == 512);

// ---- sizes per minor version (append-only: a new minor adds a line)
static_assert(MSMS_ABI_MINOR != 0 || sizeof(msms_plugin_descriptor) == 136, "descriptor size of ABI 1.0");
static_assert(MSMS_ABI_MINOR != 0 || sizeof(msms_event) == 192, "event size of ABI 1.0");
static_assert(MSMS_ABI_MINOR != 0 || sizeof(msms_host_api) == 64, "host API size of ABI 1.0");
static_assert(MSMS_ABI_MINOR != 0 || sizeof(msms_run_info) == 80, "run info size of ABI 1.0");
static_assert(MSMS_ABI_MINOR != 0 || sizeof(msms_option_spec) == 56, "option spec size of ABI 1.0");
// ABI 1.1 appended msms_plugin_descriptor.last_error; 1.2 msms_host_api.progress.
static_assert(MSMS_ABI_MINOR < 1 || sizeof(msms_plugin_descriptor) >= 144, "descriptor size of ABI 1.1");
static_assert(MSMS_ABI_MINOR < 2 || sizeof(msms_host_api) >= 72, "host API size of ABI 1.2");
// ABI 1.3 appended msms_run_info.output_dir_fd (and reserved2).
static_assert(MSMS_ABI_MINOR < 3 || sizeof(msms_run_info) >= 88, "run info size of ABI 1.3");
// ABI 1.4 appended msms_event.alloc_caller and alloc_caller_id.
static_assert(MSMS_ABI_MINOR < 4 || sizeof(msms_event) >= 216, "event size of ABI 1.4");
static_assert(sizeof(msms_plugin_descriptor) >= 136 && sizeof(msms_event) >= 192 && sizeof(msms_host_api) >= 64 &&
              sizeof(msms_run_info) >= 80);
static_assert(sizeof(msms_str) == 16 && sizeof(msms_kv) == 32 && sizeof(msms_error) == 512);
// msms_option_spec is an array element: it can never grow within a major.
static_assert(sizeof(msms_option_spec) == 56, "msms_option_spec is used in arrays: changing it is a major change");
static_assert(sizeof(msms_kv) == 32, "msms_kv is used in arrays: changing it is a major change");

// ---- offsets of ABI 1.0
    static_assert(offsetof(msms_plugin_descriptor, abi_major) == 0);
    static_assert(offsetof(msms_plugin_descriptor, abi_minor) == 4);
    static_assert(offsetof(msms_plugin_descriptor, struct_size) == 8);
    static_assert(offsetof(msms_plugin_descriptor, kind) == 12);
    static_assert(offsetof(msms_plugin_descriptor, type_name) == 16);
    static_assert(offsetof(msms_plugin_descriptor, version) == 24);
    static_assert(offsetof(msms_plugin_descriptor, description) == 32);
    static_assert(offsetof(msms_plugin_descriptor, events) == 40);
    static_assert(offsetof(msms_plugin_descriptor, options) == 48);
    static_assert(offsetof(msms_plugin_descriptor, option_count) == 56);
    static_assert(offsetof(msms_plugin_descriptor, reserved) == 60);
    static_assert(offsetof(msms_plugin_descriptor, agent_library) == 64);
    static_assert(offsetof(msms_plugin_descriptor, devices) == 72);
    static_assert(offsetof(msms_plugin_descriptor, create) == 80);
    static_assert(offsetof(msms_plugin_descriptor, destroy) == 88);
    static_assert(offsetof(msms_plugin_descriptor, begin) == 96);
    static_assert(offsetof(msms_plugin_descriptor, on_event) == 104);
    static_assert(offsetof(msms_plugin_descriptor, on_annotation) == 112);
    static_assert(offsetof(msms_plugin_descriptor, on_finding) == 120);
    static_assert(offsetof(msms_plugin_descriptor, finish) == 128);
    static_assert(offsetof(msms_event, struct_size) == 0);
    static_assert(offsetof(msms_event, kind) == 4);
    static_assert(offsetof(msms_event, type) == 6);
    static_assert(offsetof(msms_event, id) == 8);
    static_assert(offsetof(msms_event, timestamp_ns) == 16);
    static_assert(offsetof(msms_event, pid) == 24);
    static_assert(offsetof(msms_event, tid) == 28);
    static_assert(offsetof(msms_event, device_kind) == 32);
    static_assert(offsetof(msms_event, device_id) == 34);
    static_assert(offsetof(msms_event, reserved0) == 36);
    static_assert(offsetof(msms_event, ptr) == 40);
    static_assert(offsetof(msms_event, size) == 48);
    static_assert(offsetof(msms_event, allocation_id) == 56);
    static_assert(offsetof(msms_event, pool_used) == 64);
    static_assert(offsetof(msms_event, pool_total) == 72);
    static_assert(offsetof(msms_event, process_used) == 80);
    static_assert(offsetof(msms_event, device_used) == 88);
    static_assert(offsetof(msms_event, aux0) == 96);
    static_assert(offsetof(msms_event, aux1) == 104);
    static_assert(offsetof(msms_event, name) == 112);
    static_assert(offsetof(msms_event, attrs) == 128);
    static_assert(offsetof(msms_event, attr_count) == 136);
    static_assert(offsetof(msms_event, reserved1) == 140);
    static_assert(offsetof(msms_event, py_stack) == 144);
    static_assert(offsetof(msms_event, c_stack) == 160);
    static_assert(offsetof(msms_event, py_stack_id) == 176);
    static_assert(offsetof(msms_event, c_stack_id) == 184);
#if MSMS_ABI_MINOR >= 4
    static_assert(offsetof(msms_event, alloc_caller) == 192);
    static_assert(offsetof(msms_event, alloc_caller_id) == 208);
#endif
    static_assert(offsetof(msms_host_api, struct_size) == 0);
    static_assert(offsetof(msms_host_api, host) == 8);
    static_assert(offsetof(msms_host_api, log) == 16);
    static_assert(offsetof(msms_host_api, add_attr) == 24);
    static_assert(offsetof(msms_host_api, annotate) == 32);
    static_assert(offsetof(msms_host_api, emit) == 40);
    static_assert(offsetof(msms_host_api, add_finding) == 48);
    static_assert(offsetof(msms_host_api, report) == 56);
    static_assert(offsetof(msms_plugin_descriptor, last_error) == 136);  // 1.1
    static_assert(offsetof(msms_host_api, progress) == 64);              // 1.2
    // msms_progress (1.2): its own struct_size, append-only.
    static_assert(offsetof(msms_progress, struct_size) == 0);
    static_assert(offsetof(msms_progress, unit) == 4);
    static_assert(offsetof(msms_progress, what) == 8);
    static_assert(offsetof(msms_progress, done) == 24);
    static_assert(offsetof(msms_progress, total) == 32);
    static_assert(offsetof(msms_progress, flags) == 40);
    static_assert(offsetof(msms_progress, reserved) == 44);
    static_assert(sizeof(msms_progress) >= 48);
    static_assert(offsetof(msms_run_info, struct_size) == 0);
    static_assert(offsetof(msms_run_info, pid) == 4);
    static_assert(offsetof(msms_run_info, output_dir) == 8);
    static_assert(offsetof(msms_run_info, timestamp) == 24);
    static_assert(offsetof(msms_run_info, config_json) == 40);
    static_assert(offsetof(msms_run_info, command_line) == 56);
    static_assert(offsetof(msms_run_info, level) == 72);
    static_assert(offsetof(msms_run_info, reserved) == 76);
#if MSMS_ABI_MINOR >= 3
    static_assert(offsetof(msms_run_info, output_dir_fd) == 80);
    static_assert(offsetof(msms_run_info, reserved2) == 84);
#endif
    static_assert(offsetof(msms_option_spec, name) == 0);
    static_assert(offsetof(msms_option_spec, type) == 8);
    static_assert(offsetof(msms_option_spec, default_value) == 16);
    static_assert(offsetof(msms_option_spec, allowed) == 24);
    static_assert(offsetof(msms_option_spec, min) == 32);
    static_assert(offsetof(msms_option_spec, max) == 40);
    static_assert(offsetof(msms_option_spec, description) == 48);
    static_assert(offsetof(msms_str, data) == 0);
    static_assert(offsetof(msms_str, size) == 8);
    static_assert(offsetof(msms_kv, key) == 0);
    static_assert(offsetof(msms_kv, value) == 16);

// The smallest descriptor the host accepts (everything up to finish).
static_assert(offsetof(msms_plugin_descriptor, finish) + sizeof(void*) == 136);

// ---- values that are part of the ABI and of the capture format
static_assert(MSMS_OK == 0 && MSMS_ERR_INVALID_ARGUMENT == 1 && MSMS_ERR_IO == 2 && MSMS_ERR_INTERNAL == 3 &&
              MSMS_ERR_UNSUPPORTED == 4 && MSMS_ERR_EXCEPTION == 5 && MSMS_ERR_OUT_OF_MEMORY == 6);
static_assert(MSMS_EV_SYSTEM == 0 && MSMS_EV_MALLOC == 1 && MSMS_EV_FREE == 2 && MSMS_EV_ACCESS == 3 &&
              MSMS_EV_OP_LAUNCH == 4 && MSMS_EV_KERNEL_LAUNCH == 5 && MSMS_EV_MSTX == 6 && MSMS_EV_SNAPSHOT == 7 &&
              MSMS_EV_OOM_DETAIL == 8 && MSMS_EV_PY_TRACE == 9);
static_assert(MSMS_EV_KIND_COUNT >= 10);
static_assert(MSMS_T_NONE == 0 && MSMS_T_ACL_INIT == 1 && MSMS_T_ACL_FINI == 2 && MSMS_T_START_TRACE == 3 &&
              MSMS_T_STOP_TRACE == 4 && MSMS_T_STEP == 5);
static_assert(MSMS_T_HAL == 10 && MSMS_T_PTA == 11 && MSMS_T_PTA_WORKSPACE == 12 && MSMS_T_ATB == 13 &&
              MSMS_T_MINDSPORE == 14 && MSMS_T_HOST == 15 && MSMS_T_HOST_PINNED == 16);
static_assert(MSMS_T_READ == 20 && MSMS_T_WRITE == 21 && MSMS_T_UNKNOWN == 22);
static_assert(MSMS_T_ATEN_START == 30 && MSMS_T_ATEN_END == 31 && MSMS_T_ATB_START == 32 && MSMS_T_ATB_END == 33);
static_assert(MSMS_T_KERNEL_LAUNCH == 40 && MSMS_T_KERNEL_START == 41 && MSMS_T_KERNEL_END == 42);
static_assert(MSMS_T_MARK == 50 && MSMS_T_RANGE_START == 51 && MSMS_T_RANGE_END == 52);
static_assert(MSMS_T_SNAPSHOT == 60 && MSMS_T_OOM_TRIGGER == 70 && MSMS_T_OOM_RECENT_ALLOC == 71 &&
              MSMS_T_OOM_TOP_ALLOC == 72 && MSMS_T_PY_CALL == 80 && MSMS_T_PY_RECORD_FUNCTION == 81);
static_assert(MSMS_T_TYPE_LIMIT == 128);
// A collector's own pool types (issue #29 item 7): a range, no new field.
static_assert(MSMS_T_CUSTOM_POOL_FIRST == 96 && MSMS_T_CUSTOM_POOL_LAST == 111);
static_assert(MSMS_DEV_NA == 0 && MSMS_DEV_CPU == 1 && MSMS_DEV_NPU == 2 && MSMS_DEV_CUDA == 3);
static_assert(MSMS_OPT_STRING == 0 && MSMS_OPT_INT == 1 && MSMS_OPT_BOOL == 2 && MSMS_OPT_ENUM == 3 &&
              MSMS_OPT_LIST == 4);
static_assert(MSMS_PROGRESS_BYTES == 0 && MSMS_PROGRESS_ITEMS == 1 && MSMS_PROGRESS_ESTIMATE == 1);
static_assert(MSMS_KIND_COLLECTOR == 1 && MSMS_KIND_ANALYZER == 2 && MSMS_KIND_SINK == 3);

TEST_CASE("the entry symbol's name is part of the ABI") {
    CHECK(std::strcmp(MSMS_ENTRY_SYMBOL, "msmemscope_plugin") == 0);
}

TEST_CASE("event kind and type names are the CSV's strings") {
    CHECK(std::strcmp(msms_event_kind_name(MSMS_EV_MALLOC), "MALLOC") == 0);
    CHECK(std::strcmp(msms_event_kind_name(MSMS_EV_OOM_DETAIL), "OOM_DETAIL") == 0);
    CHECK(msms_event_kind_name(MSMS_EV_KIND_COUNT) == nullptr);
    CHECK(std::strcmp(msms_event_type_name(MSMS_T_RANGE_START), "Range_start") == 0);
    CHECK(std::strcmp(msms_event_type_name(MSMS_T_NONE), "N/A") == 0);
    CHECK(msms_event_type_name(MSMS_T_TYPE_LIMIT) == nullptr);
    // Every type below the limit has a name or none; names are never empty.
    for (unsigned t = 0; t < MSMS_T_TYPE_LIMIT; ++t) {
        const char* n = msms_event_type_name(static_cast<uint16_t>(t));
        if (n) CHECK(std::strlen(n) > 0);
    }
}
