/*
 * evk.c -- instance, physical devices, a logical device with one compute queue, buffers with
 * device addresses, compute pipelines, and one command buffer that batches work until flushed.
 *
 * Shaders reach memory through buffer device addresses passed in push constants, so there are
 * no descriptor sets: one pipeline layout (a push-constant range) serves every pipeline.
 */
#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "evk.h"

#define PUSH_LIMIT 128u

/* ---- the loader's entry points, resolved at run time ---------------------------------------- */

static void *loader;
static PFN_vkGetInstanceProcAddr get_instance_proc;
static VkInstance instance;
static VkPhysicalDevice *physical;
static uint32_t physical_count;

#define INSTANCE_FUNCS(X)                         \
    X(vkDestroyInstance)                          \
    X(vkEnumeratePhysicalDevices)                 \
    X(vkGetPhysicalDeviceProperties)              \
    X(vkGetPhysicalDeviceProperties2)             \
    X(vkGetPhysicalDeviceFeatures2)               \
    X(vkGetPhysicalDeviceMemoryProperties)        \
    X(vkGetPhysicalDeviceQueueFamilyProperties)   \
    X(vkCreateDevice)                             \
    X(vkGetDeviceProcAddr)

#define DEVICE_FUNCS(X)                 \
    X(vkDestroyDevice)                  \
    X(vkGetDeviceQueue)                 \
    X(vkCreateBuffer)                   \
    X(vkDestroyBuffer)                  \
    X(vkGetBufferMemoryRequirements)    \
    X(vkAllocateMemory)                 \
    X(vkFreeMemory)                     \
    X(vkBindBufferMemory)               \
    X(vkMapMemory)                      \
    X(vkGetBufferDeviceAddress)         \
    X(vkCreateShaderModule)             \
    X(vkDestroyShaderModule)            \
    X(vkCreatePipelineLayout)           \
    X(vkDestroyPipelineLayout)          \
    X(vkCreatePipelineCache)            \
    X(vkDestroyPipelineCache)           \
    X(vkCreateComputePipelines)         \
    X(vkDestroyPipeline)                \
    X(vkCreateCommandPool)              \
    X(vkDestroyCommandPool)             \
    X(vkAllocateCommandBuffers)         \
    X(vkBeginCommandBuffer)             \
    X(vkEndCommandBuffer)               \
    X(vkResetCommandBuffer)             \
    X(vkCmdBindPipeline)                \
    X(vkCmdPushConstants)               \
    X(vkCmdDispatch)                    \
    X(vkCmdPipelineBarrier)             \
    X(vkCmdCopyBuffer)                  \
    X(vkQueueSubmit)                    \
    X(vkCreateFence)                    \
    X(vkDestroyFence)                   \
    X(vkWaitForFences)                  \
    X(vkResetFences)                    \
    X(vkDeviceWaitIdle)

#define DECLARE(name) static PFN_##name name;
INSTANCE_FUNCS(DECLARE)
#undef DECLARE

struct evk_device {
    VkPhysicalDevice phys;
    VkDevice dev;
    VkQueue queue;
    VkPhysicalDeviceMemoryProperties mem;
    VkPipelineLayout layout;
    VkPipelineCache cache;
    VkCommandPool pool;
    VkCommandBuffer cmd;
    VkFence fence;
    uint32_t push_limit;
    uint32_t recorded;   /* commands in the open batch */
    int recording;
    VkPipeline bound;
#define DECLARE(name) PFN_##name name;
    DEVICE_FUNCS(DECLARE)
#undef DECLARE
};

static void say(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

int evk_init(char *err, size_t errlen) {
    if (instance) return (int)physical_count;
    if (!loader) {
        loader = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
        if (!loader) {
            say(err, errlen, "no Vulkan loader (libvulkan.so.1): %s", dlerror());
            return -1;
        }
        get_instance_proc = (PFN_vkGetInstanceProcAddr)dlsym(loader, "vkGetInstanceProcAddr");
        if (!get_instance_proc) {
            say(err, errlen, "libvulkan.so.1 has no vkGetInstanceProcAddr");
            return -1;
        }
    }
    PFN_vkCreateInstance create = (PFN_vkCreateInstance)get_instance_proc(NULL, "vkCreateInstance");
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .pApplicationName = "ember",
                             .pEngineName = "ember-vulkan", .apiVersion = VK_API_VERSION_1_2};
    VkInstanceCreateInfo info = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, .pApplicationInfo = &app};
    VkResult r = create ? create(&info, NULL, &instance) : VK_ERROR_INITIALIZATION_FAILED;
    if (r != VK_SUCCESS) {
        instance = VK_NULL_HANDLE;
        say(err, errlen, "vkCreateInstance failed (VkResult %d%s)", (int)r,
            r == VK_ERROR_INCOMPATIBLE_DRIVER ? ": no Vulkan driver (ICD) found" : "");
        return r < 0 ? (int)r : -1;
    }
#define LOAD(name) name = (PFN_##name)get_instance_proc(instance, #name);
    INSTANCE_FUNCS(LOAD)
#undef LOAD
    if (!vkEnumeratePhysicalDevices || !vkGetPhysicalDeviceFeatures2 || !vkGetDeviceProcAddr) {
        say(err, errlen, "the Vulkan loader lacks Vulkan 1.1 entry points");
        return -1;
    }
    uint32_t n = 0;
    r = vkEnumeratePhysicalDevices(instance, &n, NULL);
    if (r != VK_SUCCESS) {
        say(err, errlen, "vkEnumeratePhysicalDevices failed (VkResult %d)", (int)r);
        return (int)r;
    }
    physical = calloc(n ? n : 1, sizeof *physical);
    if (!physical) return -1;
    r = vkEnumeratePhysicalDevices(instance, &n, physical);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) {
        say(err, errlen, "vkEnumeratePhysicalDevices failed (VkResult %d)", (int)r);
        return (int)r;
    }
    physical_count = n;
    return (int)n;
}

static uint32_t compute_family(VkPhysicalDevice p) {
    uint32_t n = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(p, &n, NULL);
    VkQueueFamilyProperties fam[32];
    if (n > 32) n = 32;
    vkGetPhysicalDeviceQueueFamilyProperties(p, &n, fam);
    for (uint32_t i = 0; i < n; i++)
        if (fam[i].queueFlags & VK_QUEUE_COMPUTE_BIT) return i;
    return 0xffffffffu;
}

int evk_device_info_get(int index, evk_device_info *out) {
    VkPhysicalDevice p = physical[index];
    memset(out, 0, sizeof *out);
    VkPhysicalDeviceSubgroupProperties subgroup = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
    VkPhysicalDeviceProperties2 props = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &subgroup};
    vkGetPhysicalDeviceProperties2(p, &props);
    const VkPhysicalDeviceProperties *pr = &props.properties;
    snprintf(out->name, sizeof out->name, "%s", pr->deviceName);
    out->vendor_id = pr->vendorID;
    out->device_id = pr->deviceID;
    out->device_type = pr->deviceType;
    out->api_version = pr->apiVersion;
    out->driver_version = pr->driverVersion;
    out->subgroup_size = subgroup.subgroupSize;
    out->subgroup_arithmetic = (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT) &&
                               (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT);
    for (int i = 0; i < 3; i++) {
        out->max_group_count[i] = pr->limits.maxComputeWorkGroupCount[i];
        out->max_group_size[i] = pr->limits.maxComputeWorkGroupSize[i];
    }
    out->max_group_invocations = pr->limits.maxComputeWorkGroupInvocations;
    out->max_shared_memory = pr->limits.maxComputeSharedMemorySize;
    out->max_push_constants = pr->limits.maxPushConstantsSize;
    out->max_allocation = 0;
    VkPhysicalDeviceMemoryProperties mem;
    vkGetPhysicalDeviceMemoryProperties(p, &mem);
    out->heap_count = mem.memoryHeapCount < EVK_MAX_HEAPS ? mem.memoryHeapCount : EVK_MAX_HEAPS;
    for (uint32_t i = 0; i < out->heap_count; i++) {
        out->heap_size[i] = mem.memoryHeaps[i].size;
        out->heap_device_local[i] = (mem.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) != 0;
    }
    out->compute_queue_family = compute_family(p);
    if (VK_API_VERSION_MINOR(pr->apiVersion) >= 2 || VK_API_VERSION_MAJOR(pr->apiVersion) > 1) {
        VkPhysicalDeviceFloatControlsProperties fc = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FLOAT_CONTROLS_PROPERTIES};
        VkPhysicalDeviceMaintenance3Properties m3 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES,
                                                     .pNext = &fc};
        VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &m3};
        vkGetPhysicalDeviceProperties2(p, &p2);
        out->max_allocation = m3.maxMemoryAllocationSize;
        out->denorm_preserve_f16 = fc.shaderDenormPreserveFloat16;
        out->denorm_preserve_f32 = fc.shaderDenormPreserveFloat32;
        out->denorm_flush_f16 = fc.shaderDenormFlushToZeroFloat16;
        out->denorm_flush_f32 = fc.shaderDenormFlushToZeroFloat32;
        out->denorm_independence = (uint32_t)fc.denormBehaviorIndependence;
        VkPhysicalDeviceVulkan11Features f11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
        VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                                .pNext = &f11};
        VkPhysicalDeviceFeatures2 f = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f12};
        vkGetPhysicalDeviceFeatures2(p, &f);
        out->buffer_device_address = f12.bufferDeviceAddress;
        out->storage_8bit = f12.storageBuffer8BitAccess;
        out->storage_16bit = f11.storageBuffer16BitAccess;
        out->shader_int64 = f.features.shaderInt64;
        out->shader_float64 = f.features.shaderFloat64;
    }
    return 0;
}

static void destroy(evk_device *d) {
    if (d->dev) {
        d->vkDeviceWaitIdle(d->dev);
        if (d->fence) d->vkDestroyFence(d->dev, d->fence, NULL);
        if (d->pool) d->vkDestroyCommandPool(d->dev, d->pool, NULL);
        if (d->cache) d->vkDestroyPipelineCache(d->dev, d->cache, NULL);
        if (d->layout) d->vkDestroyPipelineLayout(d->dev, d->layout, NULL);
        d->vkDestroyDevice(d->dev, NULL);
    }
    free(d);
}

evk_device *evk_open(int index, char *err, size_t errlen) {
    evk_device_info info;
    evk_device_info_get(index, &info);
    evk_device *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->phys = physical[index];
    vkGetPhysicalDeviceMemoryProperties(d->phys, &d->mem);
    float priority = 1.0f;
    VkDeviceQueueCreateInfo queue = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                     .queueFamilyIndex = info.compute_queue_family, .queueCount = 1,
                                     .pQueuePriorities = &priority};
    VkPhysicalDeviceVulkan11Features f11 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES,
                                            .storageBuffer16BitAccess = VK_TRUE};
    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                                            .pNext = &f11, .bufferDeviceAddress = VK_TRUE,
                                            .storageBuffer8BitAccess = VK_TRUE};
    VkPhysicalDeviceFeatures2 features = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f12};
    features.features.shaderInt64 = VK_TRUE;
    features.features.shaderFloat64 = info.shader_float64 ? VK_TRUE : VK_FALSE;
    VkDeviceCreateInfo create = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &features,
                                 .queueCreateInfoCount = 1, .pQueueCreateInfos = &queue};
    VkResult r = vkCreateDevice(d->phys, &create, NULL, &d->dev);
    if (r != VK_SUCCESS) {
        say(err, errlen, "vkCreateDevice failed (VkResult %d)", (int)r);
        d->dev = VK_NULL_HANDLE;
        destroy(d);
        return NULL;
    }
#define LOAD(name) d->name = (PFN_##name)vkGetDeviceProcAddr(d->dev, #name);
    DEVICE_FUNCS(LOAD)
#undef LOAD
    d->vkGetDeviceQueue(d->dev, info.compute_queue_family, 0, &d->queue);
    d->push_limit = info.max_push_constants < PUSH_LIMIT ? info.max_push_constants : PUSH_LIMIT;
    VkPushConstantRange range = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0, .size = d->push_limit};
    VkPipelineLayoutCreateInfo layout = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                         .pushConstantRangeCount = 1, .pPushConstantRanges = &range};
    VkPipelineCacheCreateInfo cache = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
    VkCommandPoolCreateInfo pool = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                    .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                    .queueFamilyIndex = info.compute_queue_family};
    VkFenceCreateInfo fence = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if ((r = d->vkCreatePipelineLayout(d->dev, &layout, NULL, &d->layout)) != VK_SUCCESS ||
        (r = d->vkCreatePipelineCache(d->dev, &cache, NULL, &d->cache)) != VK_SUCCESS ||
        (r = d->vkCreateCommandPool(d->dev, &pool, NULL, &d->pool)) != VK_SUCCESS ||
        (r = d->vkCreateFence(d->dev, &fence, NULL, &d->fence)) != VK_SUCCESS) {
        say(err, errlen, "creating the device's pipeline layout / command pool / fence failed (VkResult %d)", (int)r);
        destroy(d);
        return NULL;
    }
    VkCommandBufferAllocateInfo alloc = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                         .commandPool = d->pool, .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                         .commandBufferCount = 1};
    if ((r = d->vkAllocateCommandBuffers(d->dev, &alloc, &d->cmd)) != VK_SUCCESS) {
        say(err, errlen, "vkAllocateCommandBuffers failed (VkResult %d)", (int)r);
        destroy(d);
        return NULL;
    }
    return d;
}

void evk_close(evk_device *d) {
    if (d) destroy(d);
}

uint32_t evk_push_limit(evk_device *d) { return d->push_limit; }

/* ---- memory ------------------------------------------------------------------------------------ */

static int memory_type(const evk_device *d, uint32_t allowed, VkMemoryPropertyFlags need, VkMemoryPropertyFlags want) {
    int fallback = -1;
    for (uint32_t i = 0; i < d->mem.memoryTypeCount; i++) {
        VkMemoryPropertyFlags flags = d->mem.memoryTypes[i].propertyFlags;
        if (!(allowed & (1u << i)) || (flags & need) != need) continue;
        if ((flags & want) == want) return (int)i;
        if (fallback < 0) fallback = (int)i;
    }
    return fallback;
}

int evk_block_alloc(evk_device *d, uint64_t size, int host, evk_block *out) {
    memset(out, 0, sizeof *out);
    VkBuffer buffer;
    VkBufferCreateInfo binfo = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = size ? size : 16,
                                .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                         VK_BUFFER_USAGE_TRANSFER_DST_BIT |
                                         VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT,
                                .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    VkResult r = d->vkCreateBuffer(d->dev, &binfo, NULL, &buffer);
    if (r != VK_SUCCESS) return (int)r;
    VkMemoryRequirements req;
    d->vkGetBufferMemoryRequirements(d->dev, buffer, &req);
    const VkMemoryPropertyFlags visible = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    int type = host ? memory_type(d, req.memoryTypeBits, visible, VK_MEMORY_PROPERTY_HOST_CACHED_BIT)
                    : memory_type(d, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0);
    if (type < 0 && !host) type = memory_type(d, req.memoryTypeBits, 0, 0);
    if (type < 0) {
        d->vkDestroyBuffer(d->dev, buffer, NULL);
        return (int)VK_ERROR_FEATURE_NOT_PRESENT;
    }
    VkMemoryAllocateFlagsInfo flags = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO,
                                       .flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT};
    VkMemoryAllocateInfo minfo = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .pNext = &flags,
                                  .allocationSize = req.size, .memoryTypeIndex = (uint32_t)type};
    VkDeviceMemory memory;
    r = d->vkAllocateMemory(d->dev, &minfo, NULL, &memory);
    if (r != VK_SUCCESS) {
        d->vkDestroyBuffer(d->dev, buffer, NULL);
        return (int)r;
    }
    VkMemoryPropertyFlags props = d->mem.memoryTypes[type].propertyFlags;
    void *mapped = NULL;
    if ((r = d->vkBindBufferMemory(d->dev, buffer, memory, 0)) != VK_SUCCESS ||
        ((props & visible) == visible && (r = d->vkMapMemory(d->dev, memory, 0, VK_WHOLE_SIZE, 0, &mapped)) != VK_SUCCESS)) {
        d->vkFreeMemory(d->dev, memory, NULL);
        d->vkDestroyBuffer(d->dev, buffer, NULL);
        return (int)r;
    }
    VkBufferDeviceAddressInfo ainfo = {.sType = VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO, .buffer = buffer};
    out->size = size;
    out->address = d->vkGetBufferDeviceAddress(d->dev, &ainfo);
    out->mapped = mapped;
    out->host_visible = mapped != NULL;
    out->device_local = (props & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) != 0;
    out->buffer = (void *)buffer;
    out->memory = (void *)memory;
    return 0;
}

void evk_block_free(evk_device *d, evk_block *b) {
    if (!b->buffer) return;
    d->vkDestroyBuffer(d->dev, (VkBuffer)b->buffer, NULL);
    d->vkFreeMemory(d->dev, (VkDeviceMemory)b->memory, NULL);  /* unmaps implicitly */
    memset(b, 0, sizeof *b);
}

/* ---- pipelines --------------------------------------------------------------------------------- */

void *evk_pipeline_create(evk_device *d, const uint32_t *code, size_t nbytes, const uint32_t *spec, uint32_t nspec,
                          char *err, size_t errlen) {
    VkShaderModuleCreateInfo sinfo = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, .codeSize = nbytes,
                                      .pCode = code};
    VkShaderModule module;
    VkResult r = d->vkCreateShaderModule(d->dev, &sinfo, NULL, &module);
    if (r != VK_SUCCESS) {
        say(err, errlen, "vkCreateShaderModule failed (VkResult %d)", (int)r);
        return NULL;
    }
    VkSpecializationMapEntry entries[EVK_MAX_SPEC];
    if (nspec > EVK_MAX_SPEC) nspec = EVK_MAX_SPEC;
    for (uint32_t i = 0; i < nspec; i++)
        entries[i] = (VkSpecializationMapEntry){.constantID = i, .offset = 4 * i, .size = 4};
    VkSpecializationInfo special = {.mapEntryCount = nspec, .pMapEntries = entries, .dataSize = 4 * nspec,
                                    .pData = spec};
    VkComputePipelineCreateInfo info = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                  .module = module, .pName = "main", .pSpecializationInfo = nspec ? &special : NULL},
        .layout = d->layout};
    VkPipeline pipeline = VK_NULL_HANDLE;
    r = d->vkCreateComputePipelines(d->dev, d->cache, 1, &info, NULL, &pipeline);
    d->vkDestroyShaderModule(d->dev, module, NULL);
    if (r != VK_SUCCESS) {
        say(err, errlen, "vkCreateComputePipelines failed (VkResult %d)", (int)r);
        return NULL;
    }
    return (void *)pipeline;
}

void evk_pipeline_destroy(evk_device *d, void *pipeline) {
    d->vkDestroyPipeline(d->dev, (VkPipeline)pipeline, NULL);
}

/* ---- recording and submission ------------------------------------------------------------------ */

static void barrier(evk_device *d, VkPipelineStageFlags dst_stage, VkAccessFlags dst_access) {
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                          .dstAccessMask = dst_access};
    d->vkCmdPipelineBarrier(d->cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, dst_stage,
                            0, 1, &mb, 0, NULL, 0, NULL);
}

/* Opens the batch, or orders the next command after every earlier one. */
static int next_command(evk_device *d) {
    if (!d->recording) {
        VkCommandBufferBeginInfo begin = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                          .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
        VkResult r = d->vkBeginCommandBuffer(d->cmd, &begin);
        if (r != VK_SUCCESS) return (int)r;
        d->recording = 1;
        d->bound = VK_NULL_HANDLE;
    } else {
        barrier(d, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                    VK_ACCESS_TRANSFER_WRITE_BIT);
    }
    d->recorded++;
    return 0;
}

int evk_dispatch(evk_device *d, void *pipeline, const void *push, uint32_t push_size, uint32_t gx, uint32_t gy,
                 uint32_t gz) {
    int r = next_command(d);
    if (r) return r;
    if (d->bound != (VkPipeline)pipeline) {
        d->vkCmdBindPipeline(d->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, (VkPipeline)pipeline);
        d->bound = (VkPipeline)pipeline;
    }
    if (push_size) d->vkCmdPushConstants(d->cmd, d->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, push_size, push);
    d->vkCmdDispatch(d->cmd, gx, gy, gz);
    return 0;
}

int evk_copy(evk_device *d, const evk_block *src, uint64_t src_offset, const evk_block *dst, uint64_t dst_offset,
             uint64_t nbytes) {
    int r = next_command(d);
    if (r) return r;
    VkBufferCopy region = {.srcOffset = src_offset, .dstOffset = dst_offset, .size = nbytes};
    d->vkCmdCopyBuffer(d->cmd, (VkBuffer)src->buffer, (VkBuffer)dst->buffer, 1, &region);
    return 0;
}

int evk_flush(evk_device *d) {
    if (!d->recording) return 0;
    barrier(d, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);  /* results visible to the host */
    VkResult r = d->vkEndCommandBuffer(d->cmd);
    d->recording = 0;
    d->recorded = 0;
    if (r == VK_SUCCESS) {
        VkSubmitInfo submit = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1,
                               .pCommandBuffers = &d->cmd};
        r = d->vkQueueSubmit(d->queue, 1, &submit, d->fence);
        if (r == VK_SUCCESS) {
            r = d->vkWaitForFences(d->dev, 1, &d->fence, VK_TRUE, UINT64_MAX);
            d->vkResetFences(d->dev, 1, &d->fence);
        }
    }
    d->vkResetCommandBuffer(d->cmd, 0);
    return (int)r;
}

uint32_t evk_recorded(evk_device *d) { return d->recorded; }
