// _torch_observer: the PyTorch operator tracker in C++ (optional; built only
// where the libtorch headers are found). A RecordFunction global callback for
// aten operators (scope FUNCTION) emits, through the agent,
//   OP_LAUNCH ATEN_START / ATEN_END (Name = the operator as upstream names
//   it, torch._ops.aten.<op>.<overload>; device cpu, or in CUDA mode the
//   thread's current CUDA device), and
//   with "access": ACCESS READ (tensor inputs) / WRITE (tensor outputs), Ptr
//   the storage's base address, Attr dtype, shape, size, format, type
//   (CPU tensors on cpu; in CUDA mode CUDA tensors on their own device),
// the same rows as the Python TorchDispatchMode of _torch.py (upstream's
// aten collection is such a mode), without a Python call per operator. It
// also keeps _msmemscope's per-thread operator depth (the "ops@aten" owner of
// tensor storage allocated inside an op).
//
// The same rows, not more: a RecordFunction callback hears every call into
// the dispatcher, while a dispatch mode sees only the calls that reach the
// Python key with no operator of its own in progress. So rows are written
// for an operator only
// * when no operator this observer wrote rows for is running on the thread
//   (what an operator's kernel calls -- bmm's select and as_strided per
//   batch, a copy's empty_strided, a scalar's to() -- is inside it, below
//   the mode), nor is the Python key excluded (torch.tensor() builds its
//   tensor so), and
// * unless its autograd kernel does not dispatch further (detach, detach_),
//   and
// * unless the call decomposes above the Python key: an operator whose
//   autograd key takes its CompositeImplicitAutograd kernel (linear,
//   matmul, softmax, to: the dispatcher's rule, OperatorEntry's
//   computeDispatchTableEntry) runs that kernel at the autograd key, and
//   the mode sees what it calls instead; with the autograd keys excluded
//   (inference_mode) the kernel runs at the backend key, below the mode,
//   which then sees the operator itself.
// A GPT-style training step makes ~5,100 such calls and the mode sees ~950
// of them; tests/python/test_aten_rows_match_dispatch_mode.py holds the
// two to the same rows.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <pybind11/pybind11.h>

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <array>
#include <atomic>
#include <string>
#include <unordered_map>

#include <msmemscope/abi.h>

#include "hooks_off.h"

namespace py = pybind11;

namespace {

using event_fn = void (*)(uint16_t, uint16_t, uint16_t, int16_t, uint64_t, uint64_t, uint64_t, uint64_t,
                          const char*, const char*);
using event_cached_fn = void (*)(uint16_t, uint16_t, uint16_t, int16_t, uint64_t, uint64_t, uint64_t, uint64_t,
                                 const char*, uint64_t*, const char*);
using op_event_fn = void (*)(uint16_t, uint16_t, uint16_t, int16_t, uint64_t, uint64_t, const char*, uint64_t*,
                             const char*, uint64_t*);
using collecting_fn = int (*)();

// From _msmemscope (capsule "msmemscope.op_depth").
struct OpDepthApi {
    void (*enter)();
    void (*exit)();
};

event_fn g_event = nullptr;
event_cached_fn g_event_cached = nullptr;
op_event_fn g_op_event = nullptr;
collecting_fn g_collecting = nullptr;
OpDepthApi g_depth{nullptr, nullptr};
std::atomic<bool> g_launch{false};
std::atomic<bool> g_access{false};
// CUDA mode (the target uses torch.cuda: msmemscope/_cuda.py): the driver's
// cuCtxGetDevice, resolved at enable() from the loaded libcuda.so.1.
using ctx_get_device_fn = int (*)(int*);
std::atomic<ctx_get_device_fn> g_ctx_get_device{nullptr};
std::atomic<bool> g_cuda{false};
bool g_registered = false;
at::CallbackHandle g_handle = 0;

// An operator's Name as written (upstream's: the OpOverload's
// f"{__module__}.{__name__}", e.g. aten::mm -> torch._ops.aten.mm.default;
// python/msmemscope/aten_collection.py) and the agent's cache of its id.
struct OpName {
    std::string raw;   // fn.name() when made: the schema's name
    std::string name;
    uint64_t cache[2] = {0, 0};
    // Whether a call with autograd decomposes above the Python key, for CPU
    // tensors ([0]) and CUDA tensors ([1]); see the top of this file.
    bool decomposes[2] = {false, false};
    // The key whose kernel (torch/csrc/autograd/VariableTypeManual.cpp)
    // returns without dispatching further, so that the call never reaches
    // the Python key while that key is not excluded: detach_'s Autograd
    // kernel, detach's and _fw_primal's ADInplaceOrView kernels.
    // Undefined: none.
    c10::DispatchKey stops_at = c10::DispatchKey::Undefined;
};

// The dispatcher's choice for an autograd key (OperatorEntry's
// computeDispatchTableEntry): the operator's own kernel for that key first;
// else its CompositeImplicitAutograd kernel, unless it has a kernel for the
// key's backends or a CompositeExplicitAutograd one.
bool decomposes_at(const c10::OperatorHandle& h, c10::DispatchKey autograd_key) {
    using K = c10::DispatchKey;
    return !h.hasKernelForDispatchKey(autograd_key) && h.hasKernelForDispatchKey(K::CompositeImplicitAutograd) &&
           !h.hasKernelForAnyDispatchKey(c10::getBackendKeySetFromAutograd(autograd_key)) &&
           !h.hasKernelForDispatchKey(K::CompositeExplicitAutograd);
}

// Per thread, by the name's pointer: an operator's is its schema's string,
// made when the operator was registered and kept. Only operators are
// remembered; a record without a schema (a user scope, an autograd engine
// range: its name is its own string, often at an address another one had
// before) is asked each time, which costs it nothing (no schema, nothing
// copied), while asking an operator for its name copies two strings.
// In front of the map, a direct-mapped cache of the pointers seen last: a
// training step makes ~5 k operator calls, each one outside another's rows
// asked at its start (its end keeps the answer in its Call), and the map's
// hashing, bucket walk and string compare showed in the program's profile
// (~34 ns a call).
// Also the thread's records in progress, innermost last: each keeps the
// Python stack its operator's rows share (the agent's msms_agent_op_event
// takes it at the first row and the others reuse it), so the end row costs
// no second look at the interpreter's frames.
struct OpNames {
    static constexpr unsigned kSlots = 256;
    std::array<std::pair<const char*, OpName*>, kSlots> recent{};
    std::unordered_map<const char*, OpName> by_schema;
    static unsigned slot(const char* raw) {
        return static_cast<unsigned>((reinterpret_cast<uintptr_t>(raw) * 0x9E3779B97F4A7C15ull) >> 56);
    }
    struct Call {
        const at::RecordFunction* fn;
        uint64_t stack[2];
        OpName* op;  // the operator, when this call writes rows (counted in `writing`); else nullptr
    };
    static constexpr unsigned kCalls = 128;
    std::array<Call, kCalls> calls{};
    unsigned depth = 0;  // may pass kCalls: deeper records keep nothing and write no rows
    bool writing = false;  // a call in progress writes rows: the calls under it write none
    // Every start pushes and every end pops (a record's callbacks run on
    // its thread, nested); nullptr past kCalls.
    Call* push(const at::RecordFunction& fn) {
        unsigned d = depth++;
        if (d >= kCalls) return nullptr;
        calls[d] = Call{&fn, {0, 0}, nullptr};
        return &calls[d];
    }
    // The record's own entry (read before the next push), or nullptr.
    Call* pop(const at::RecordFunction& fn) {
        if (depth == 0) return nullptr;
        unsigned d = --depth;
        return d < kCalls && calls[d].fn == &fn ? &calls[d] : nullptr;
    }
};
static_assert(OpNames::kSlots == 256, "slot()'s shift");
// initial-exec: in the static TLS block, so that a thread's first operator
// does not make glibc allocate this module's TLS block (that allocation was
// recorded as the program's, a block held at the first operator's line until
// exit). One pointer; if the static block had no room, importing the module
// fails and the Python dispatch mode tracks operators instead.
__thread OpNames* t_names __attribute__((tls_model("initial-exec"))) = nullptr;

OpName* op_name_slow(const at::RecordFunction& fn, const char* raw);

__attribute__((noinline)) OpNames* make_names() {
    msms_py::HooksOff hooks_off;  // the observer's own memory
    return t_names = new OpNames();
}

// The operator's name, or nullptr for a record without a schema.
OpName* op_name(const at::RecordFunction& fn) {
    const char* raw = fn.name();
    if (OpNames* names = t_names) {
        auto& hot = names->recent[OpNames::slot(raw)];
        // The same text too: an operator unregistered (its library unloaded)
        // frees its schema's string, and another name may be made there.
        if (hot.first == raw && strcmp(hot.second->raw.c_str(), raw) == 0) return hot.second;
    }
    return op_name_slow(fn, raw);
}

__attribute__((noinline)) OpName* op_name_slow(const at::RecordFunction& fn, const char* raw) {
    msms_py::HooksOff hooks_off;  // the name caches: the observer's own memory
    OpNames* names = t_names;
    if (!names) names = make_names();
    auto& hot = names->recent[OpNames::slot(raw)];
    auto it = names->by_schema.find(raw);
    if (it == names->by_schema.end() || it->second.raw != raw) {
        auto op = fn.operator_name();
        if (!op) return nullptr;
        OpName& entry = names->by_schema[raw];
        entry = OpName{};
        entry.raw = raw;
        size_t sep = op->name.find("::");
        entry.name = sep == std::string::npos
                         ? std::string(raw)
                         : "torch._ops." + op->name.substr(0, sep) + "." + op->name.substr(sep + 2) + "." +
                               (op->overload_name.empty() ? std::string("default") : op->overload_name);
        if (op->name == "aten::detach_") entry.stops_at = c10::DispatchKey::AutogradFunctionality;
        else if (op->name == "aten::detach" || op->name == "aten::_fw_primal")
            entry.stops_at = c10::DispatchKey::ADInplaceOrView;
        if (auto h = c10::Dispatcher::singleton().findOp(*op)) {
            entry.decomposes[0] = decomposes_at(*h, c10::DispatchKey::AutogradCPU);
            entry.decomposes[1] = decomposes_at(*h, c10::DispatchKey::AutogradCUDA);
        }
        it = names->by_schema.find(raw);
    }
    hot = {raw, &it->second};  // unordered_map nodes stay put: the pointer lives as long as the entry
    return &it->second;
}

struct Device {
    uint16_t kind;
    int16_t id;
};
constexpr Device kCpu{MSMS_DEV_CPU, -1};

// An operator row's device: as upstream's (ReportAtenLaunch: the thread's
// current device), the thread's current CUDA device in CUDA mode when a
// context is current; else cpu.
Device op_device() {
    ctx_get_device_fn f = g_ctx_get_device.load(std::memory_order_relaxed);
    int d = -1;
    if (f && f(&d) == 0 && d >= 0) return Device{MSMS_DEV_CUDA, static_cast<int16_t>(d)};
    return kCpu;
}

// `stack`: the operator call's shared Python stack (nullptr: the row takes its own).
void emit(uint16_t kind, uint16_t type, Device dev, uint64_t ptr, uint64_t size, OpName& op, const char* attrs,
          uint64_t* stack) {
    if (g_op_event)
        g_op_event(kind, type, dev.kind, dev.id, ptr, size, op.name.c_str(), op.cache, attrs, stack);
    else if (g_event_cached)
        g_event_cached(kind, type, dev.kind, dev.id, ptr, size, 0, 0, op.name.c_str(), op.cache, attrs);
    else
        g_event(kind, type, dev.kind, dev.id, ptr, size, 0, 0, op.name.c_str(), attrs);
}

const char* dtype_name(c10::ScalarType t) {
    switch (t) {
    case c10::ScalarType::Byte: return "torch.uint8";
    case c10::ScalarType::Char: return "torch.int8";
    case c10::ScalarType::Short: return "torch.int16";
    case c10::ScalarType::Int: return "torch.int32";
    case c10::ScalarType::Long: return "torch.int64";
    case c10::ScalarType::Half: return "torch.float16";
    case c10::ScalarType::Float: return "torch.float32";
    case c10::ScalarType::Double: return "torch.float64";
    case c10::ScalarType::ComplexHalf: return "torch.complex32";
    case c10::ScalarType::ComplexFloat: return "torch.complex64";
    case c10::ScalarType::ComplexDouble: return "torch.complex128";
    case c10::ScalarType::Bool: return "torch.bool";
    case c10::ScalarType::QInt8: return "torch.qint8";
    case c10::ScalarType::QUInt8: return "torch.quint8";
    case c10::ScalarType::QInt32: return "torch.qint32";
    case c10::ScalarType::BFloat16: return "torch.bfloat16";
    default: return nullptr;
    }
}

// One ACCESS row for a CPU dense tensor (as _torch._access_event). A Python
// number the operator was given (`x * 0.5`: a wrapped-number tensor here)
// reaches a dispatch mode as the number, and gets no row.
void access_tensor(const at::Tensor& t, uint16_t type, OpName& op, uint64_t* stack) {
    if (!t.defined() || t.is_sparse() || t.layout() != c10::kStrided) return;
    if (t.unsafeGetTensorImpl()->is_wrapped_number()) return;
    Device dev = kCpu;
    if (t.device().is_cuda() && g_cuda.load(std::memory_order_relaxed))
        dev = Device{MSMS_DEV_CUDA, static_cast<int16_t>(t.device().has_index() ? t.device().index() : 0)};
    else if (!t.device().is_cpu())
        return;
    if (!t.has_storage()) return;
    const void* base = t.storage().data();
    if (!base) return;
    uint64_t size = static_cast<uint64_t>(t.numel()) * t.element_size();
    char attrs[512];
    size_t n = 0;
    const char* dt = dtype_name(t.scalar_type());
    std::string dts;
    if (!dt) {
        dts = std::string("torch.") + c10::toString(t.scalar_type());
        dt = dts.c_str();
    }
    // upstream's formats: shape as str(torch.Size) prints it, type = the pool
    n += snprintf(attrs + n, sizeof(attrs) - n, "dtype:%s,shape:torch.Size([", dt);
    auto sizes = t.sizes();
    for (size_t i = 0; i < sizes.size() && n < sizeof(attrs) - 64; ++i)
        n += snprintf(attrs + n, sizeof(attrs) - n, i ? ", %lld" : "%lld", static_cast<long long>(sizes[i]));
    snprintf(attrs + n, sizeof(attrs) - n, "]),size:%llu,format:%s,type:PTA", static_cast<unsigned long long>(size),
             t.is_contiguous() ? "contiguous" : "strided");
    emit(MSMS_EV_ACCESS, type, dev, reinterpret_cast<uint64_t>(base), size, op, attrs, stack);
}

void access_value(const c10::IValue& v, uint16_t type, OpName& op, uint64_t* stack) {
    if (v.isTensor()) {
        access_tensor(v.toTensor(), type, op, stack);
    } else if (v.isTensorList()) {
        for (const at::Tensor& t : v.toTensorVector()) access_tensor(t, type, op, stack);
    } else if (v.isList()) {
        for (const c10::IValue& x : v.toListRef())
            if (x.isTensor()) access_tensor(x.toTensor(), type, op, stack);
    }
}

// Whether a call of `op` starting now is one a dispatch mode would see (see
// the top of this file); the thread writes rows for no other call.
bool seen_by_mode(const OpName& op, const OpNames& names) {
    if (names.writing) return false;
    // PyTorch keeps some calls from modes (torch.tensor() builds its tensor
    // with the Python key excluded)
    if (c10::impl::tls_is_dispatch_key_excluded(c10::DispatchKey::Python)) return false;
    const bool cuda = g_cuda.load(std::memory_order_relaxed);
    // (autograd's keys are excluded as a functionality, for every backend:
    // inference_mode, AutoDispatchBelowAutograd)
    if (op.stops_at != c10::DispatchKey::Undefined && !c10::impl::tls_is_dispatch_key_excluded(op.stops_at))
        return false;
    if (!op.decomposes[cuda]) return true;
    // decomposes above the Python key only while autograd dispatches
    return c10::impl::tls_is_dispatch_key_excluded(c10::DispatchKey::AutogradFunctionality);
}

// Rows only for operators, as upstream's dispatch-mode collection names them
// (torch._ops.aten.<op>.<overload>): records without a schema -- autograd's
// engine ranges ("autograd::engine::evaluate_function: AddmmBackward0"),
// user scopes -- write nothing (issue #28 item 8); they still count for the
// depth, so their allocations keep the Python stack taken at their entry.
std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
    if (g_depth.enter) g_depth.enter();
    OpNames* names = t_names;
    if (__builtin_expect(!names, 0)) names = make_names();
    OpNames::Call* call = names->push(fn);
    if (!call || names->writing || !g_collecting()) return nullptr;
    OpName* op = op_name(fn);
    if (!op || !seen_by_mode(*op, *names)) return nullptr;
    call->op = op;
    names->writing = true;
    uint64_t* stack = call->stack;
    OpName& name = *op;
    // Upstream's order (aten_collection.py): ATEN_START, the inputs' ACCESS
    // rows, (the operator), the outputs' ACCESS rows, ATEN_END -- an
    // operator's accesses lie inside it, where upstream's inefficient
    // analysis counts them to the operator's API.
    if (g_launch.load(std::memory_order_relaxed))
        emit(MSMS_EV_OP_LAUNCH, MSMS_T_ATEN_START, op_device(), 0, 0, name, nullptr, stack);
    if (g_access.load(std::memory_order_relaxed) && fn.needsInputs())
        for (const c10::IValue& v : fn.inputs()) access_value(v, MSMS_T_READ, name, stack);
    return nullptr;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext*) {
    OpNames::Call* call = t_names ? t_names->pop(fn) : nullptr;
    if (!call || !call->op) {
        if (g_depth.exit) g_depth.exit();
        return;
    }
    t_names->writing = false;
    uint64_t* stack = call->stack;
    if (g_collecting()) {
        OpName& name = *call->op;  // named at the start: no second look-up
        if (g_access.load(std::memory_order_relaxed) && fn.needsOutputs())
            for (const c10::IValue& v : fn.outputs()) access_value(v, MSMS_T_WRITE, name, stack);
        if (g_launch.load(std::memory_order_relaxed))
            emit(MSMS_EV_OP_LAUNCH, MSMS_T_ATEN_END, op_device(), 0, 0, name, nullptr, stack);
    }
    if (g_depth.exit) g_depth.exit();
}

ctx_get_device_fn resolve_ctx_get_device() {
    void* f = nullptr;
    if (void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD)) {
        f = dlsym(h, "cuCtxGetDevice");
        dlclose(h);  // NOLOAD took a reference of its own
    }
    if (!f) f = dlsym(RTLD_DEFAULT, "cuCtxGetDevice");
    return reinterpret_cast<ctx_get_device_fn>(f);
}

// Turns the observer on: launch = ATEN_START/END rows, access = ACCESS rows
// (needs the operators' inputs and outputs: costs a copy of them per op),
// cuda = CUDA mode (operator rows on the current CUDA device, CUDA tensors'
// ACCESS rows on theirs); the driver must be loaded by then (it is once
// torch.cuda.is_available() has been asked).
void enable(bool launch, bool access, py::capsule depth, bool cuda) {
    msms_py::HooksOff hooks_off;  // the callback's registration: PyTorch's memory, for us
    if (!g_event) {
        g_event = reinterpret_cast<event_fn>(dlsym(RTLD_DEFAULT, "msms_agent_event"));
        g_event_cached = reinterpret_cast<event_cached_fn>(dlsym(RTLD_DEFAULT, "msms_agent_event_cached"));
        g_op_event = reinterpret_cast<op_event_fn>(dlsym(RTLD_DEFAULT, "msms_agent_op_event"));
        g_collecting = reinterpret_cast<collecting_fn>(dlsym(RTLD_DEFAULT, "msms_agent_collecting"));
        if (!g_event || !g_collecting) {
            g_event = nullptr;
            throw std::runtime_error("msmemscope: the agent is not loaded in this process");
        }
    }
    g_depth = *static_cast<OpDepthApi*>(depth.get_pointer());
    g_launch = launch;
    g_access = access;
    g_cuda = cuda;
    g_ctx_get_device = cuda ? resolve_ctx_get_device() : nullptr;
    if (g_registered) at::removeCallback(g_handle);
    g_handle = at::addGlobalCallback(at::RecordFunctionCallback(&on_start, &on_end)
                                         .needsInputs(access)
                                         .needsOutputs(access)
                                         .scopes({at::RecordScope::FUNCTION}));
    g_registered = true;
}

void disable() {
    msms_py::HooksOff hooks_off;  // the callback's removal
    if (g_registered) {
        at::removeCallback(g_handle);
        g_registered = false;
    }
}

}  // namespace

PYBIND11_MODULE(_torch_observer, m) {
    msms_py::HooksOff hooks_off;  // pybind11's function records of this module
    m.doc() = "aten operator tracking by a RecordFunction callback (not a public API)";
    m.def("enable", &enable, py::arg("launch"), py::arg("access"), py::arg("depth"), py::arg("cuda") = false);
    m.def("disable", &disable);
    m.def("enabled", [] { return g_registered; });
}
