/*
 * ember_core._hotpath: the compiled per-op hot path (optional; ember_core/hotpath.py documents it).
 *
 * Three things, all behind the pure-Python path that stays the reference:
 *   - TensorBase and StorageBase: the fields of ember_core.tensor's Tensor and Storage as a C struct,
 *     so that C can build a result and a dying Storage returns its block to the device's pool
 *     without running Python code;
 *   - FastOp: an elementwise op's forward (no autograd recording) that runs the fast case itself:
 *     exact Tensors (or one Python scalar) on one device, one dtype the provider computes in, one
 *     shape, each operand contiguous or one repeated element, a provider that exports a direct C
 *     entry.  Anything else calls the Python forward it wraps;
 *     Given its autograd recording function (record_with), a FastOp is also the op's public
 *     entry: calls that must be recorded go to that function, the others run as above;
 *   - TensorBase's number slots (a + b, a * b, -a...), which call their op's FastOp.
 * A plan per (dtypes, device) comes from a Python planner once; clear() drops every plan (plugins
 * or configuration changed) and pause()/resume() bracket preference blocks, during which every
 * call takes the Python path.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>

#include "ember.h"

/* ---- Storage ------------------------------------------------------------------------------ */

/* Each type's object fields, once: X(field, attribute name) makes the struct, the member table,
   the GC's traversal and the clearing. */
#define STORAGE_FIELDS(X) X(blocks, "blocks") X(device, "device") X(free, "free") X(handle, "handle") \
    X(nbytes, "nbytes") X(version, "version")
#define TENSOR_FIELDS(X) X(storage, "_storage") X(shape, "_shape") X(strides, "_strides") X(offset, "_offset") \
    X(dtype, "_dtype") X(device, "_device") X(numel, "_numel") X(contig, "_contig")                        \
    X(requires_grad, "_requires_grad") X(grad, "grad") X(grad_fn, "grad_fn") X(autograd, "_autograd")     \
    X(base, "_base") X(native, "_native")
#define AS_FIELD(f, name) PyObject *f;
#define AS_MEMBER(f, name) {name, T_OBJECT_EX, offsetof(OBJECT, f), 0, NULL},
#define AS_VISIT(f, name) Py_VISIT(self->f);
#define AS_CLEAR(f, name) Py_CLEAR(self->f);

/* A GC object's end: untracked, weak references told, fields cleared, memory freed. */
static void
dealloc_object(PyObject *self, PyObject *weakrefs, inquiry clear)
{
    PyObject_GC_UnTrack(self);
    if (weakrefs)
        PyObject_ClearWeakRefs(self);
    clear(self);
    Py_TYPE(self)->tp_free(self);
}

typedef struct {
    PyObject_HEAD
    STORAGE_FIELDS(AS_FIELD)
    PyObject *weakrefs;
} StorageObject;

static PyObject *s_free, *s_pool, *s_enabled, *s_zero;  /* interned names and the int 0 */
static Py_ssize_t max_pooled = 32;            /* ember_core.tensor._BLOCKS_PER_SIZE, set by configure */
static Py_ssize_t small_block = 1 << 16;      /* ember_core.tensor._SMALL_BLOCK */

/* The handle goes back to its size's pool, or to the backend's free hook (as Storage.__del__). */
static void
storage_release(StorageObject *self)
{
    PyObject *free = self->free;
    if (free == NULL || free == Py_None)
        return;
    self->free = NULL;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    int pooled = 0;
    if (self->blocks && PyList_CheckExact(self->blocks) && PyList_GET_SIZE(self->blocks) < max_pooled) {
        PyObject *current = PyObject_GetAttr(self->device, s_free);  /* unregistered since: not pooled */
        if (current == free)
            pooled = PyList_Append(self->blocks, self->handle) == 0;
        Py_XDECREF(current);
    }
    if (!pooled) {
        PyObject *r = PyObject_CallFunctionObjArgs(free, self->device, self->handle, NULL);
        Py_XDECREF(r);
    }
    PyErr_Clear();  /* a finalizer must not raise (the backend is told by contract) */
    PyErr_Restore(type, value, tb);
    Py_DECREF(free);
}

static int
storage_traverse(StorageObject *self, visitproc visit, void *arg)
{
    STORAGE_FIELDS(AS_VISIT)
    return 0;
}

static int
storage_clear(StorageObject *self)
{
    storage_release(self);  /* (first: a Storage the GC clears gives its block back too) */
    STORAGE_FIELDS(AS_CLEAR)
    return 0;
}

static void
storage_dealloc(StorageObject *self)
{
    dealloc_object((PyObject *)self, self->weakrefs, (inquiry)storage_clear);
}

#define OBJECT StorageObject
static PyMemberDef storage_members[] = {STORAGE_FIELDS(AS_MEMBER) {NULL}};
#undef OBJECT

static PyTypeObject StorageBase = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ember_core._hotpath.StorageBase",
    .tp_doc = "Storage's fields, and the return of its block to the pool when it dies.",
    .tp_basicsize = sizeof(StorageObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_dealloc = (destructor)storage_dealloc,
    .tp_traverse = (traverseproc)storage_traverse,
    .tp_clear = (inquiry)storage_clear,
    .tp_weaklistoffset = offsetof(StorageObject, weakrefs),
    .tp_members = storage_members,
};

/* ---- Tensor ------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    TENSOR_FIELDS(AS_FIELD)
    PyObject *weakrefs;
} TensorObject;

static int
tensor_traverse(TensorObject *self, visitproc visit, void *arg)
{
    TENSOR_FIELDS(AS_VISIT)
    return 0;
}

static int
tensor_clear(TensorObject *self)
{
    TENSOR_FIELDS(AS_CLEAR)
    return 0;
}

static void
tensor_dealloc(TensorObject *self)
{
    dealloc_object((PyObject *)self, self->weakrefs, (inquiry)tensor_clear);
}

#define OBJECT TensorObject
static PyMemberDef tensor_members[] = {TENSOR_FIELDS(AS_MEMBER) {NULL}};
#undef OBJECT

static PyTypeObject TensorBase;  /* defined below, with its number slots */

/* ---- configuration (set once by ember_core.hotpath) ---------------------------------------- */

static PyTypeObject *tensor_type, *storage_type, *cdata_type;  /* Tensor, Storage, cffi's _CDataBase */
static PyObject *scalar_operand;  /* ember_core.ops.families.scalar_operand(value, partner) */
static PyObject *grad_mode;       /* ember_core.autograd.grad_mode.MODE: .enabled, per thread */
static uint64_t generation = 1;   /* plans made under an older generation are stale */
static long paused;               /* preference blocks open in any thread: no fast path */

/* cffi's cdata object (its pointer after the type, as cffi has always laid it out; configure
   checks it against ffi.cast('uintptr_t', ...) before anything uses it). */
typedef struct {
    PyObject_HEAD
    void *ctype;
    char *data;
} CDataView;

static inline char *
handle_address(PyObject *storage)
{
    if (!PyObject_TypeCheck(storage, &StorageBase))
        return NULL;
    PyObject *h = ((StorageObject *)storage)->handle;
    if (h == NULL || !PyObject_TypeCheck(h, cdata_type))
        return NULL;
    return ((CDataView *)h)->data;
}

/* ---- making results ----------------------------------------------------------------------- */

static PyObject *last_shape, *last_strides;  /* the contiguous strides of the last shape made */

static PyObject *
contiguous_strides(PyObject *shape)
{
    if (shape != last_shape) {
        Py_ssize_t ndim = PyTuple_GET_SIZE(shape);
        PyObject *strides = PyTuple_New(ndim);
        if (strides == NULL)
            return NULL;
        long long acc = 1;
        for (Py_ssize_t i = ndim - 1; i >= 0; i--) {
            PyObject *s = PyLong_FromLongLong(acc);
            if (s == NULL) {
                Py_DECREF(strides);
                return NULL;
            }
            PyTuple_SET_ITEM(strides, i, s);
            long long n = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
            acc *= n > 1 ? n : 1;
        }
        Py_INCREF(shape);
        Py_XSETREF(last_shape, shape);
        Py_XSETREF(last_strides, strides);
    }
    Py_INCREF(last_strides);
    return last_strides;
}

/* A Storage of nbytes on device: a pooled block without Python, else Storage(device, nbytes). */
static PyObject *
new_storage(PyObject *device, PyObject *pool, Py_ssize_t nbytes)
{
    PyObject *size = PyLong_FromSsize_t(nbytes);
    if (size == NULL)
        return NULL;
    PyObject *blocks = nbytes <= small_block ? PyDict_GetItemWithError(pool, size) : NULL;  /* borrowed */
    if (blocks && PyList_CheckExact(blocks) && PyList_GET_SIZE(blocks) > 0) {
        PyObject *free = PyObject_GetAttr(device, s_free);
        if (free == NULL || free == Py_None) {
            Py_XDECREF(free);
            PyErr_Clear();
        } else {
            Py_INCREF(blocks);
            StorageObject *s = (StorageObject *)storage_type->tp_alloc(storage_type, 0);
            Py_ssize_t last = PyList_GET_SIZE(blocks) - 1;  /* (after the allocation, which may run the GC) */
            if (s == NULL || last < 0) {
                Py_XDECREF(s);
                Py_DECREF(blocks);
                Py_DECREF(free);
                if (s == NULL) {
                    Py_DECREF(size);
                    return NULL;
                }
            } else {
                s->handle = Py_NewRef(PyList_GET_ITEM(blocks, last));
                PyList_SetSlice(blocks, last, last + 1, NULL);
                s->blocks = blocks;
                s->device = Py_NewRef(device);
                s->nbytes = size;
                s->version = Py_NewRef(s_zero);
                s->free = free;
                return (PyObject *)s;
            }
        }
    }
    if (PyErr_Occurred()) {
        Py_DECREF(size);
        return NULL;
    }
    PyObject *s = PyObject_CallFunctionObjArgs((PyObject *)storage_type, device, size, NULL);
    Py_DECREF(size);
    return s;
}

/* A fresh contiguous Tensor (Tensor._make_contiguous); takes over the reference to strides. */
static TensorObject *
new_tensor(PyObject *storage, PyObject *shape, PyObject *strides, PyObject *numel, PyObject *dtype,
           PyObject *device)
{
    TensorObject *t = (TensorObject *)tensor_type->tp_alloc(tensor_type, 0);
    if (t == NULL) {
        Py_DECREF(strides);
        return NULL;
    }
    t->storage = Py_NewRef(storage);
    t->shape = Py_NewRef(shape);
    t->strides = strides;
    t->offset = Py_NewRef(s_zero);
    t->dtype = Py_NewRef(dtype);
    t->device = Py_NewRef(device);
    t->numel = Py_NewRef(numel);
    t->contig = Py_NewRef(Py_True);
    t->requires_grad = Py_NewRef(Py_False);
    t->grad = Py_NewRef(Py_None);
    t->grad_fn = Py_NewRef(Py_None);
    t->autograd = Py_NewRef(Py_None);
    t->base = Py_NewRef(Py_None);
    t->native = Py_NewRef(Py_None);
    return t;
}

/* ---- FastOp ------------------------------------------------------------------------------- */

typedef struct {
    uint64_t generation;
    PyObject *dtype1, *dtype2, *device;  /* the key, compared by identity (all interned) */
    void *entry;                         /* the provider's direct entry; NULL: this key takes Python */
    int code, dtype_code;
    Py_ssize_t itemsize;                 /* of the result dtype */
    PyObject *out_dtype, *pool;          /* pool: the device's {nbytes: [freed blocks]} */
} Plan;

#define PLANS 4

typedef struct {
    PyObject_HEAD
    int arity;
    PyObject *forward;  /* the Python forward (builders' op): every call the fast case does not take */
    PyObject *planner;  /* planner(x1, x2 or None) -> (entry, code, dtype code, itemsize, out dtype, pool) | None */
    PyObject *recorded; /* recorded(args, kwargs): the call autograd records (formulas); NULL: a forward only */
    PyObject *attach;   /* attach(result, args, kwargs): its node for a result computed here; may be NULL */
    PyObject *dict;
    vectorcallfunc vectorcall;
    Plan plans[PLANS];
    int next_plan;
} FastOpObject;

static void
plan_reset(Plan *p)
{
    Py_CLEAR(p->dtype1);
    Py_CLEAR(p->dtype2);
    Py_CLEAR(p->device);
    Py_CLEAR(p->out_dtype);
    Py_CLEAR(p->pool);
    p->entry = NULL;
    p->generation = 0;
}

static Plan *
make_plan(FastOpObject *op, TensorObject *x1, TensorObject *x2)
{
    PyObject *made = PyObject_CallFunctionObjArgs(op->planner, x1, x2 ? (PyObject *)x2 : Py_None, NULL);
    if (made == NULL)
        return NULL;
    Plan *p = &op->plans[op->next_plan];
    op->next_plan = (op->next_plan + 1) % PLANS;
    plan_reset(p);
    if (made != Py_None) {
        unsigned long long entry;
        PyObject *out_dtype, *pool;
        if (!PyArg_ParseTuple(made, "KiinOO!", &entry, &p->code, &p->dtype_code, &p->itemsize, &out_dtype,
                              &PyDict_Type, &pool)) {
            Py_DECREF(made);
            return NULL;
        }
        p->entry = (void *)(uintptr_t)entry;
        p->out_dtype = Py_NewRef(out_dtype);
        p->pool = Py_NewRef(pool);
    }
    Py_DECREF(made);
    p->dtype1 = Py_NewRef(x1->dtype);
    p->dtype2 = x2 ? Py_NewRef(x2->dtype) : NULL;
    p->device = Py_NewRef(x1->device);
    p->generation = generation;
    return p;
}

static inline Plan *
find_plan(FastOpObject *op, TensorObject *x1, TensorObject *x2)
{
    PyObject *dtype2 = x2 ? x2->dtype : NULL;
    for (int i = 0; i < PLANS; i++) {
        Plan *p = &op->plans[i];
        if (p->generation == generation && p->dtype1 == x1->dtype && p->dtype2 == dtype2 && p->device == x1->device)
            return p;
    }
    return make_plan(op, x1, x2);
}

/* How an operand walks a contiguous output: 1 contiguous, 0 one repeated element, -1 neither. */
static int
flat_step(TensorObject *t)
{
    if (t->contig == Py_True)
        return 1;
    PyObject *strides = t->strides;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(strides); i++)
        if (PyTuple_GET_ITEM(strides, i) != s_zero)
            return -1;
    return 0;
}

static PyObject *run_plan(Plan *plan, TensorObject *like, TensorObject *x1, TensorObject *x2, int step1,
                          int step2);

#define GIL_FREE_ABOVE 32768  /* elements: larger calls let other Python threads run meanwhile */

/* The fast case, or NULL with no error set when it does not apply (the caller runs Python). */
static PyObject *
try_fast(FastOpObject *op, PyObject *a, PyObject *b)
{
    if (paused || tensor_type == NULL)
        return NULL;
    PyObject *scalar = NULL, *result = NULL;
    TensorObject *x1, *x2 = NULL;
    if (op->arity == 1) {
        if (Py_TYPE(a) != tensor_type)
            return NULL;
        x1 = (TensorObject *)a;
    } else if (Py_TYPE(a) == tensor_type && Py_TYPE(b) == tensor_type) {
        x1 = (TensorObject *)a;
        x2 = (TensorObject *)b;
    } else {  /* one Python scalar: families.scalar_operand makes (and caches) its tensor */
        int first = Py_TYPE(a) == tensor_type;
        PyObject *value = first ? b : a, *partner = first ? a : b;
        if ((!first && Py_TYPE(b) != tensor_type) || !(PyFloat_CheckExact(value) || PyLong_CheckExact(value)) ||
            scalar_operand == NULL)
            return NULL;
        scalar = PyObject_CallFunctionObjArgs(scalar_operand, value, partner, NULL);
        if (scalar == NULL || Py_TYPE(scalar) != tensor_type)
            goto decline;
        x1 = (TensorObject *)(first ? a : scalar);
        x2 = (TensorObject *)(first ? scalar : b);
    }
    TensorObject *like = x1;  /* the operand whose shape the result has */
    int step1, step2 = 0;
    if (x2) {
        if (x2->device != x1->device)
            goto decline;
        int same = x2->shape == x1->shape ? 1 : PyObject_RichCompareBool(x2->shape, x1->shape, Py_EQ);
        if (same == 1) {
            step1 = flat_step(x1);
            step2 = flat_step(x2);
        } else if (same == 0 && PyTuple_GET_SIZE(x2->shape) == 0) {  /* a 0-d operand broadcasts: one element */
            step1 = flat_step(x1);
        } else if (same == 0 && PyTuple_GET_SIZE(x1->shape) == 0) {
            step1 = 0;
            step2 = flat_step(x2);
            like = x2;
        } else {
            goto decline;
        }
        if (step1 < 0 || step2 < 0)
            goto decline;
    } else if ((step1 = flat_step(x1)) != 1) {
        goto decline;
    }
    Plan *found = find_plan(op, x1, x2);
    if (found == NULL || found->entry == NULL)
        goto decline;
    Plan plan = *found;  /* (a copy: another thread may replace that slot while this one runs Python) */
    Py_INCREF(plan.out_dtype);
    Py_INCREF(plan.pool);
    result = run_plan(&plan, like, x1, x2, step1, step2);
    Py_DECREF(plan.out_dtype);
    Py_DECREF(plan.pool);
decline:
    Py_XDECREF(scalar);
    PyErr_Clear();  /* whatever went wrong, the Python path meets it again and reports it */
    return result;
}

/* Allocate the result and call the provider's direct entry; NULL when anything fails. */
static PyObject *
run_plan(Plan *plan, TensorObject *like, TensorObject *x1, TensorObject *x2, int step1, int step2)
{
    long long n = PyLong_AsLongLong(like->numel);
    long long off1 = PyLong_AsLongLong(x1->offset), off2 = x2 ? PyLong_AsLongLong(x2->offset) : 0;
    char *p1 = handle_address(x1->storage), *p2 = x2 ? handle_address(x2->storage) : NULL;
    if (PyErr_Occurred() || p1 == NULL || (x2 && p2 == NULL))
        return NULL;
    PyObject *storage = new_storage(x1->device, plan->pool, (Py_ssize_t)(n * plan->itemsize));
    if (storage == NULL)
        return NULL;
    PyObject *strides = contiguous_strides(like->shape);
    TensorObject *out = strides ? new_tensor(storage, like->shape, strides, like->numel, plan->out_dtype, like->device)
                                : NULL;
    char *po = handle_address(storage);
    Py_DECREF(storage);
    if (out == NULL || po == NULL) {
        Py_XDECREF(out);
        return NULL;
    }
    int status;
    PyThreadState *released = n > GIL_FREE_ABOVE ? PyEval_SaveThread() : NULL;
    if (x2)
        status = ((ember_binary_flat_fn)plan->entry)(plan->code, plan->dtype_code, n, po, 0, p1, off1, step1, p2,
                                                     off2, step2);
    else
        status = ((ember_unary_flat_fn)plan->entry)(plan->code, plan->dtype_code, n, po, 0, p1, off1);
    if (released)
        PyEval_RestoreThread(released);
    if (status != 0) {  /* the Python path runs it again and raises the provider's own error */
        Py_DECREF(out);
        return NULL;
    }
    return (PyObject *)out;
}

static PyObject *
fastop_call2(FastOpObject *op, PyObject *a, PyObject *b)
{
    PyObject *r = try_fast(op, a, b);
    if (r)
        return r;
    return b ? PyObject_CallFunctionObjArgs(op->forward, a, b, NULL) : PyObject_CallOneArg(op->forward, a);
}

static inline int
records(PyObject *x)
{
    return Py_TYPE(x) == tensor_type && ((TensorObject *)x)->requires_grad == Py_True;
}

/* The op as its public entry: recorded when an operand requires grad and grad mode is on (as
   formulas' own entry decides), else the forward. */
static PyObject *
fastop_entry(FastOpObject *op, PyObject *a, PyObject *b)
{
    if (op->recorded && (records(a) || (b && records(b)))) {
        PyObject *enabled = PyObject_GetAttr(grad_mode, s_enabled);
        int on = enabled ? PyObject_IsTrue(enabled) : -1;
        Py_XDECREF(enabled);
        if (on < 0)
            return NULL;
        if (on) {  /* the forward in C when it can (it records nothing itself), then the node */
            PyObject *result = op->attach ? try_fast(op, a, b) : NULL;
            PyObject *args = b ? PyTuple_Pack(2, a, b) : PyTuple_Pack(1, a), *kwargs = PyDict_New(), *r = NULL;
            if (args && kwargs)
                r = result ? PyObject_CallFunctionObjArgs(op->attach, result, args, kwargs, NULL)
                           : PyObject_CallFunctionObjArgs(op->recorded, args, kwargs, NULL);
            Py_XDECREF(result);
            Py_XDECREF(args);
            Py_XDECREF(kwargs);
            return r;
        }
    }
    return fastop_call2(op, a, b);
}

static PyObject *
fastop_vectorcall(FastOpObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (kwnames == NULL && nargs == op->arity)
        return fastop_entry(op, args[0], nargs == 2 ? args[1] : NULL);
    return PyObject_Vectorcall(op->forward, args, nargsf, kwnames);  /* (its TypeError for a bad call) */
}

static PyObject *
fastop_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"forward", "planner", "arity", NULL};
    PyObject *forward, *planner;
    int arity;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOi", names, &forward, &planner, &arity))
        return NULL;
    if (arity != 1 && arity != 2) {
        PyErr_SetString(PyExc_ValueError, "FastOp: arity must be 1 or 2");
        return NULL;
    }
    FastOpObject *op = (FastOpObject *)type->tp_alloc(type, 0);
    if (op == NULL)
        return NULL;
    op->forward = Py_NewRef(forward);
    op->planner = Py_NewRef(planner);
    op->arity = arity;
    op->vectorcall = (vectorcallfunc)fastop_vectorcall;
    return (PyObject *)op;
}

static int
fastop_traverse(FastOpObject *op, visitproc visit, void *arg)
{
    Py_VISIT(op->forward);
    Py_VISIT(op->planner);
    Py_VISIT(op->recorded);
    Py_VISIT(op->attach);
    Py_VISIT(op->dict);
    return 0;
}

static int
fastop_clear(FastOpObject *op)
{
    Py_CLEAR(op->forward);
    Py_CLEAR(op->planner);
    Py_CLEAR(op->recorded);
    Py_CLEAR(op->attach);
    Py_CLEAR(op->dict);
    for (int i = 0; i < PLANS; i++)
        plan_reset(&op->plans[i]);
    return 0;
}

static void
fastop_dealloc(FastOpObject *op)
{
    dealloc_object((PyObject *)op, NULL, (inquiry)fastop_clear);
}

static PyObject *
fastop_get(PyObject *op, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None)
        return Py_NewRef(op);
    return PyMethod_New(op, obj);  /* a Tensor method, as a Python function would bind */
}

static PyObject *
fastop_repr(PyObject *op)
{
    PyObject *name = ((FastOpObject *)op)->dict ? PyDict_GetItemString(((FastOpObject *)op)->dict, "__qualname__")
                                                : NULL;  /* (borrowed; ops/__init__ names every op) */
    return name ? PyUnicode_FromFormat("<ember op %S (compiled hot path)>", name)
                : PyUnicode_FromFormat("<ember op at %p (compiled hot path)>", op);
}

static PyTypeObject FastOp = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ember_core._hotpath.FastOp",
    .tp_doc = "FastOp(forward, planner, arity): an elementwise op's forward with its fast case compiled.",
    .tp_basicsize = sizeof(FastOpObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_new = fastop_new,
    .tp_dealloc = (destructor)fastop_dealloc,
    .tp_traverse = (traverseproc)fastop_traverse,
    .tp_clear = (inquiry)fastop_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(FastOpObject, vectorcall),
    .tp_descr_get = fastop_get,
    .tp_repr = fastop_repr,
    .tp_dictoffset = offsetof(FastOpObject, dict),
};

/* ---- TensorBase's number slots ------------------------------------------------------------ */

enum { SLOT_ADD, SLOT_SUB, SLOT_MUL, SLOT_DIV, SLOT_NEG, SLOT_COUNT };
static const char *slot_methods[SLOT_COUNT] = {"__add__", "__sub__", "__mul__", "__truediv__", "__neg__"};
static FastOpObject *slot_op[SLOT_COUNT];  /* NULL: not bound (the slot answers NotImplemented) */

/* a <op> b, for either operand order (the op's entry takes them in this order either way) */
static PyObject *
number_slot(int slot, PyObject *a, PyObject *b)
{
    FastOpObject *op = slot_op[slot];
    if (op == NULL)
        Py_RETURN_NOTIMPLEMENTED;
    return fastop_entry(op, a, b);
}

static PyObject *nb_add(PyObject *a, PyObject *b) { return number_slot(SLOT_ADD, a, b); }
static PyObject *nb_sub(PyObject *a, PyObject *b) { return number_slot(SLOT_SUB, a, b); }
static PyObject *nb_mul(PyObject *a, PyObject *b) { return number_slot(SLOT_MUL, a, b); }
static PyObject *nb_div(PyObject *a, PyObject *b) { return number_slot(SLOT_DIV, a, b); }
static PyObject *nb_neg(PyObject *a) { return number_slot(SLOT_NEG, a, NULL); }

static PyNumberMethods tensor_number = {
    .nb_add = nb_add,
    .nb_subtract = nb_sub,
    .nb_multiply = nb_mul,
    .nb_true_divide = nb_div,
    .nb_negative = nb_neg,
};

static PyTypeObject TensorBase = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "ember_core._hotpath.TensorBase",
    .tp_doc = "Tensor's fields and its compiled arithmetic operators.",
    .tp_basicsize = sizeof(TensorObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_dealloc = (destructor)tensor_dealloc,
    .tp_traverse = (traverseproc)tensor_traverse,
    .tp_clear = (inquiry)tensor_clear,
    .tp_weaklistoffset = offsetof(TensorObject, weakrefs),
    .tp_members = tensor_members,
    .tp_as_number = &tensor_number,
};

/* ---- module functions --------------------------------------------------------------------- */

static PyObject *
configure(PyObject *module, PyObject *args)
{
    PyObject *tensor, *storage, *cdata, *mode;
    if (!PyArg_ParseTuple(args, "O!O!O!Onn", &PyType_Type, &tensor, &PyType_Type, &storage, &PyType_Type, &cdata,
                          &mode, &small_block, &max_pooled))
        return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)tensor, &TensorBase) ||
        !PyType_IsSubtype((PyTypeObject *)storage, &StorageBase)) {
        PyErr_SetString(PyExc_TypeError, "configure: Tensor and Storage must derive from TensorBase and StorageBase");
        return NULL;
    }
    Py_XSETREF(tensor_type, (PyTypeObject *)Py_NewRef(tensor));
    Py_XSETREF(storage_type, (PyTypeObject *)Py_NewRef(storage));
    Py_XSETREF(cdata_type, (PyTypeObject *)Py_NewRef(cdata));
    Py_XSETREF(grad_mode, Py_NewRef(mode));
    Py_RETURN_NONE;
}

static PyObject *
serve_scalars(PyObject *module, PyObject *fn)
{
    Py_XSETREF(scalar_operand, Py_NewRef(fn));
    Py_RETURN_NONE;
}

static PyObject *
bind_slot(PyObject *module, PyObject *args)
{
    const char *method;
    PyObject *op;
    if (!PyArg_ParseTuple(args, "sO!", &method, &FastOp, &op))
        return NULL;
    for (int i = 0; i < SLOT_COUNT; i++) {
        if (strcmp(method, slot_methods[i]) == 0) {
            Py_XSETREF(slot_op[i], (FastOpObject *)Py_NewRef(op));
            Py_RETURN_TRUE;
        }
    }
    Py_RETURN_FALSE;
}

static PyObject *
record_with(PyObject *module, PyObject *args)
{
    PyObject *op, *recorded, *attach;
    if (!PyArg_ParseTuple(args, "O!OO", &FastOp, &op, &recorded, &attach))
        return NULL;
    Py_XSETREF(((FastOpObject *)op)->recorded, Py_NewRef(recorded));
    Py_XSETREF(((FastOpObject *)op)->attach, attach == Py_None ? NULL : Py_NewRef(attach));
    Py_RETURN_NONE;
}

static PyObject *
make_contiguous(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 || tensor_type == NULL || !PyObject_TypeCheck(args[0], &StorageBase) || !PyTuple_CheckExact(args[1]) ||
        !PyTuple_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "make_contiguous(storage, shape, strides, numel, dtype): configure first");
        return NULL;
    }
    PyObject *device = ((StorageObject *)args[0])->device;
    if (device == NULL) {
        PyErr_SetString(PyExc_AttributeError, "make_contiguous: the storage has no device");
        return NULL;
    }
    return (PyObject *)new_tensor(args[0], args[1], Py_NewRef(args[2]), args[3], args[4], device);
}

static PyObject *
storage_of(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || storage_type == NULL) {
        PyErr_SetString(PyExc_TypeError, "new_storage(device, nbytes): configure first");
        return NULL;
    }
    Py_ssize_t nbytes = PyLong_AsSsize_t(args[1]);
    if (nbytes == -1 && PyErr_Occurred()) {
        PyErr_Clear();  /* Storage() itself says what is wrong with it */
        return PyObject_Vectorcall((PyObject *)storage_type, args, nargs, NULL);
    }
    PyObject *pool = PyObject_GetAttr(args[0], s_pool);
    if (pool == NULL || !PyDict_CheckExact(pool)) {
        Py_XDECREF(pool);
        PyErr_Clear();
        return PyObject_Vectorcall((PyObject *)storage_type, args, nargs, NULL);
    }
    PyObject *s = new_storage(args[0], pool, nbytes);
    Py_DECREF(pool);
    return s;
}

static PyObject *
cdata_address(PyObject *module, PyObject *h)
{
    if (cdata_type == NULL || !PyObject_TypeCheck(h, cdata_type)) {
        PyErr_SetString(PyExc_TypeError, "cdata_address: not a cffi cdata object (configure first)");
        return NULL;
    }
    return PyLong_FromVoidPtr(((CDataView *)h)->data);
}

static PyObject *
clear_plans(PyObject *module, PyObject *unused)
{
    generation++;
    Py_RETURN_NONE;
}

static PyObject *
pause_plans(PyObject *module, PyObject *unused)
{
    paused++;
    Py_RETURN_NONE;
}

static PyObject *
resume_plans(PyObject *module, PyObject *unused)
{
    if (paused > 0)
        paused--;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS,
     "configure(Tensor, Storage, cdata_type, grad_mode, small_block, blocks_per_size)"},
    {"serve_scalars", serve_scalars, METH_O,
     "serve_scalars(scalar_operand): a Python int or float operand becomes scalar_operand(value, partner)"},
    {"bind_slot", bind_slot, METH_VARARGS, "bind_slot(method, op) -> bool: serve a Tensor operator (__add__...) in C"},
    {"record_with", record_with, METH_VARARGS,
     "record_with(op, recorded, attach): op becomes its op's public entry; recorded(args, kwargs) records a "
     "call, attach(result, args, kwargs) the node of a result computed in C (None: always recorded())"},
    {"make_contiguous", (PyCFunction)(void (*)(void))make_contiguous, METH_FASTCALL,
     "make_contiguous(storage, shape, strides, numel, dtype): Tensor._make_contiguous"},
    {"new_storage", (PyCFunction)(void (*)(void))storage_of, METH_FASTCALL,
     "new_storage(device, nbytes): Storage(device, nbytes), a pooled block taken without Python"},
    {"cdata_address", cdata_address, METH_O, "the address a cffi pointer holds (configure checks it)"},
    {"clear", clear_plans, METH_NOARGS, "forget every plan (plugins or configuration changed)"},
    {"pause", pause_plans, METH_NOARGS, "a preference block opened: every call takes the Python path"},
    {"resume", resume_plans, METH_NOARGS, "a preference block closed"},
    {NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "ember_core._hotpath", "ember's compiled per-op hot path (see ember_core.hotpath)", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__hotpath(void)
{
    /* object's own constructor, so that object.__new__(Tensor) (Tensor._make_contiguous) stays allowed */
    StorageBase.tp_new = TensorBase.tp_new = PyBaseObject_Type.tp_new;
    if (PyType_Ready(&StorageBase) < 0 || PyType_Ready(&TensorBase) < 0 || PyType_Ready(&FastOp) < 0)
        return NULL;
    s_free = PyUnicode_InternFromString("_free");
    s_pool = PyUnicode_InternFromString("_pool");
    s_enabled = PyUnicode_InternFromString("enabled");
    s_zero = PyLong_FromLong(0);
    PyObject *m = PyModule_Create(&module);
    if (m == NULL || s_free == NULL || s_pool == NULL || s_enabled == NULL || s_zero == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "StorageBase", (PyObject *)&StorageBase) < 0 ||
        PyModule_AddObjectRef(m, "TensorBase", (PyObject *)&TensorBase) < 0 ||
        PyModule_AddObjectRef(m, "FastOp", (PyObject *)&FastOp) < 0 ||
        PyModule_AddIntConstant(m, "ABI_MAJOR", EMBER_ABI_MAJOR) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
