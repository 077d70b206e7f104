/*
 * evk.h -- ember-vulkan's thin C layer over the Vulkan loader (declarations cffi also reads).
 *
 * The loader is opened with dlopen at run time, so a machine without libvulkan imports the
 * plugin fine and reports "unavailable" instead of failing to load.  Every entry point trusts
 * its arguments: ember_vulkan's Python modules validate handles, sizes and offsets first.
 * Functions return 0 on success or a negative VkResult; messages go into the caller's buffer.
 */
#include <stddef.h>
#include <stdint.h>

#define EVK_MAX_HEAPS 16
#define EVK_MAX_SPEC 8

typedef struct {
    char name[256];
    uint32_t vendor_id, device_id, device_type, api_version, driver_version;
    uint32_t subgroup_size;
    uint32_t subgroup_arithmetic;    /* 1: compute shaders may use subgroupAdd and the like */
    uint32_t max_group_count[3];
    uint32_t max_group_size[3];
    uint32_t max_group_invocations;
    uint32_t max_shared_memory;
    uint32_t max_push_constants;
    uint64_t max_allocation;
    uint32_t heap_count;
    uint64_t heap_size[EVK_MAX_HEAPS];
    uint32_t heap_device_local[EVK_MAX_HEAPS];
    uint32_t compute_queue_family;   /* 0xffffffff: none */
    /* features ember-vulkan's shaders may use (1 = supported) */
    uint32_t buffer_device_address, storage_8bit, storage_16bit, shader_int64, shader_float64;
    /* Vulkan 1.2 float controls (1 = supported): whether a shader may ask to keep or to flush
     * subnormals; denorm_independence is a VkShaderFloatControlsIndependence (0: 32-bit only,
     * 1: all, 2: none). */
    uint32_t denorm_preserve_f16, denorm_preserve_f32, denorm_flush_f16, denorm_flush_f32, denorm_independence;
} evk_device_info;

typedef struct {
    uint64_t size;
    uint64_t address;      /* the buffer's device address: what shaders are given */
    void *mapped;          /* host pointer when host-visible, else NULL */
    uint32_t host_visible;
    uint32_t device_local;
    void *buffer;          /* VkBuffer */
    void *memory;          /* VkDeviceMemory */
} evk_block;

typedef struct evk_device evk_device;

/* Opens the loader and creates the instance (once); returns the number of physical devices, or
 * a negative value with the reason in err. */
int evk_init(char *err, size_t errlen);
int evk_device_info_get(int index, evk_device_info *out);

evk_device *evk_open(int index, char *err, size_t errlen);
void evk_close(evk_device *d);

/* Memory: one VkBuffer bound to its own VkDeviceMemory.  host = 1 asks for host-visible,
 * coherent memory (staging); host = 0 prefers device-local memory. */
int evk_block_alloc(evk_device *d, uint64_t size, int host, evk_block *out);
void evk_block_free(evk_device *d, evk_block *b);

/* Pipelines: a compute pipeline from SPIR-V words with specialization constants 0..nspec-1
 * (32-bit each), using the device's one layout (push constants only, no descriptor sets). */
void *evk_pipeline_create(evk_device *d, const uint32_t *code, size_t nbytes, const uint32_t *spec,
                          uint32_t nspec, char *err, size_t errlen);
void evk_pipeline_destroy(evk_device *d, void *pipeline);

/* Recording into the open batch (opened on demand).  Each command waits for every earlier one
 * of the batch (a full compute/transfer memory barrier), so no read-after-write hazard exists. */
int evk_dispatch(evk_device *d, void *pipeline, const void *push, uint32_t push_size, uint32_t gx, uint32_t gy,
                 uint32_t gz);
int evk_copy(evk_device *d, const evk_block *src, uint64_t src_offset, const evk_block *dst, uint64_t dst_offset,
             uint64_t nbytes);
/* Submits the open batch and waits for it; a no-op when nothing is recorded. */
int evk_flush(evk_device *d);
uint32_t evk_recorded(evk_device *d);
uint32_t evk_push_limit(evk_device *d);
