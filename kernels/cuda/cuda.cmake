# The CUDA backend (included by the root CMakeLists.txt when nvcc is found).
#   mhecuda      the nvcc build for sm_80 and sm_90, warnings as errors; linked into mhetrain.
#   mhecuda_emu  the same .cu sources compiled as host C++ against emu/cuda_emu.h, with
#                AddressSanitizer; linked only into tests (never into the release binary).
#   mhecuda_emu_tsan  the same under ThreadSanitizer (when the compiler has it), for the `tsan` tests.
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
find_path(MHE_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
find_library(MHE_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
if(NOT MHE_NCCL_INCLUDE_DIR OR NOT MHE_NCCL_LIBRARY)
  message(FATAL_ERROR "CUDA backend: nccl.h / libnccl not found (looked under the CUDA toolkit)")
endif()
option(MHE_CUDA_PTXAS_VERBOSE "Print ptxas register/spill figures for every kernel" OFF)

file(GLOB MHE_CUDA_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*.cu)

# cuda_libs.cpp stands in for cuBLAS, cuBLASLt and NCCL, opening them at run time (nvcc build only).
add_library(mhecuda STATIC ${MHE_CUDA_SOURCES} ${CMAKE_CURRENT_LIST_DIR}/cuda_libs.cpp)
set_target_properties(mhecuda PROPERTIES CUDA_ARCHITECTURES "80;90" CUDA_STANDARD 17
  CUDA_STANDARD_REQUIRED ON POSITION_INDEPENDENT_CODE ON)
target_include_directories(mhecuda PRIVATE ${MHE_LAYERS_DIR}/mhe_kernels ${MHE_NCCL_INCLUDE_DIR})
target_compile_options(mhecuda PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:--Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Werror>
  $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${MHE_CUDA_PTXAS_VERBOSE}>>:-Xptxas=-v>)
# Every compile keeps ptxas's figures (registers, static shared memory per kernel and
# architecture) next to its object; the emulation checks launches against them (ptxas_table.inc).
set_target_properties(mhecuda PROPERTIES CUDA_COMPILER_LAUNCHER "sh;${CMAKE_CURRENT_LIST_DIR}/emu/ptxas_capture.sh")
# Not cuBLAS, cuBLASLt or NCCL: cuda_libs.cpp opens them when a CUDA backend is made (a CPU run
# of this build never maps them: 230 -> ~11 MB resident for `mhetrain info`).  The NCCL library
# found above is only the proof at configure time that the toolkit has one.
target_include_directories(mhecuda SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
target_link_libraries(mhecuda PUBLIC mhe_kernels CUDA::cudart_static ${CMAKE_DL_LIBS} MPI::MPI_C)

# The cuDNN attention core's graphs (cuda_attn_cudnn.cpp, host C++17): the cuDNN frontend's
# header-only graph API (PyPI nvidia-cudnn-frontend, pinned; launch/setup.sh unpacks its headers
# into .deps/) and cudnn.h (the toolkit's, or PyTorch's nvidia-cudnn wheel's).  libcudnn itself
# is opened at run time, so neither the build nor a machine without it needs it; without the
# headers the core is left out and the registry says so.
set(MHE_CUDNN_FRONTEND_DIR "${CMAKE_SOURCE_DIR}/.deps/cudnn-frontend/include" CACHE PATH
  "Folder holding cudnn_frontend.h (the cuDNN frontend's headers)")
find_path(MHE_CUDNN_FE_INCLUDE cudnn_frontend.h HINTS ${MHE_CUDNN_FRONTEND_DIR} NO_DEFAULT_PATH)
find_path(MHE_CUDNN_INCLUDE cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include $ENV{MHE_CUDNN_INCLUDE})
if(MHE_CUDNN_FE_INCLUDE AND MHE_CUDNN_INCLUDE)
  # Shared: the frontend's code is large, and every GPU program (mhetrain and the check's tools,
  # tests/gpu/bundle.sh) loads one copy instead of carrying its own.
  add_library(mhecudnn SHARED ${CMAKE_CURRENT_LIST_DIR}/cuda_attn_cudnn.cpp)
  set_target_properties(mhecudnn PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON POSITION_INDEPENDENT_CODE ON)
  target_include_directories(mhecudnn PRIVATE ${MHE_LAYERS_DIR}/mhe_kernels)
  target_include_directories(mhecudnn SYSTEM PRIVATE ${MHE_CUDNN_FE_INCLUDE} ${MHE_CUDNN_INCLUDE} ${CUDAToolkit_INCLUDE_DIRS})
  target_compile_options(mhecudnn PRIVATE -Werror)
  target_link_libraries(mhecudnn PUBLIC ${CMAKE_DL_LIBS})
  set(MHE_HAVE_CUDNN ON)
  message(STATUS "CUDA backend: the cuDNN attention core is built (frontend headers ${MHE_CUDNN_FE_INCLUDE})")
else()
  set(MHE_HAVE_CUDNN OFF)
  message(STATUS "CUDA backend: no cuDNN frontend headers (${MHE_CUDNN_FRONTEND_DIR}) or cudnn.h: the cuDNN "
    "attention core is left out (launch/setup.sh installs the headers)")
endif()
if(MHE_HAVE_CUDNN)
  target_compile_definitions(mhecuda PRIVATE MHE_HAVE_CUDNN=1)
  target_link_libraries(mhecuda PUBLIC mhecudnn)
endif()

# The emulated twin: one generated .cpp per .cu that includes it, so the same file is compiled
# by nvcc for mhecuda and by g++ here.
set(MHE_CUDA_EMU_SOURCES ${CMAKE_CURRENT_LIST_DIR}/emu/cuda_emu.cpp ${CMAKE_CURRENT_LIST_DIR}/emu/cuda_emu_lt.cpp
  ${CMAKE_CURRENT_LIST_DIR}/emu/cuda_emu_launch.cpp)
# The real build's ptxas figures, regenerated whenever mhecuda is rebuilt.
set(MHE_PTXAS_TABLE ${CMAKE_BINARY_DIR}/cuda_emu/ptxas_table.inc)
add_custom_command(OUTPUT ${MHE_PTXAS_TABLE}
  COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/emu/ptxas_table.sh ${MHE_PTXAS_TABLE} $<TARGET_OBJECTS:mhecuda>
  DEPENDS mhecuda ${CMAKE_CURRENT_LIST_DIR}/emu/ptxas_table.sh
  COMMENT "ptxas figures of mhecuda for the emulation" COMMAND_EXPAND_LISTS VERBATIM)
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/emu/cuda_emu_launch.cpp PROPERTIES OBJECT_DEPENDS ${MHE_PTXAS_TABLE})
list(APPEND MHE_CUDA_EMU_SOURCES ${MHE_PTXAS_TABLE})
foreach(src ${MHE_CUDA_SOURCES})
  get_filename_component(stem ${src} NAME_WE)
  set(wrapper ${CMAKE_BINARY_DIR}/cuda_emu/${stem}_emu.cpp)
  file(CONFIGURE OUTPUT ${wrapper} CONTENT "#include \"${src}\"\n")
  list(APPEND MHE_CUDA_EMU_SOURCES ${wrapper})
endforeach()
# The emulated library under a sanitizer: `address` (mhecuda_emu, every emulated test) or
# `thread` (mhecuda_emu_tsan: races between the emulated threads, the `tsan` tests).
function(mhe_cuda_emu_library name sanitizer)
  add_library(${name} STATIC ${MHE_CUDA_EMU_SOURCES})
  target_compile_definitions(${name} PUBLIC MHE_CUDA_EMU=1)
  target_include_directories(${name} PUBLIC ${CMAKE_SOURCE_DIR})
  target_include_directories(${name} PRIVATE ${CMAKE_BINARY_DIR}/cuda_emu)
  target_include_directories(${name} SYSTEM PUBLIC ${CUDAToolkit_INCLUDE_DIRS} ${MHE_NCCL_INCLUDE_DIR})
  target_compile_options(${name} PUBLIC -fsanitize=${sanitizer} -fno-omit-frame-pointer)
  # nvcc's `#pragma unroll` means nothing to g++; the emulated build ignores it.
  target_compile_options(${name} PRIVATE -Werror -Wno-unknown-pragmas)
  target_link_options(${name} PUBLIC -fsanitize=${sanitizer})
  target_link_libraries(${name} PUBLIC mhe_kernels PkgConfig::OPENBLAS MPI::MPI_C pthread)
endfunction()
mhe_cuda_emu_library(mhecuda_emu address)
# ThreadSanitizer where the compiler has it (and the rest of the build is not under ASan).
include(CheckCXXSourceCompiles)
set(CMAKE_REQUIRED_FLAGS -fsanitize=thread)
set(CMAKE_REQUIRED_LINK_OPTIONS -fsanitize=thread)
check_cxx_source_compiles("int main() { return 0; }" MHE_HAVE_TSAN)
unset(CMAKE_REQUIRED_FLAGS)
unset(CMAKE_REQUIRED_LINK_OPTIONS)
if(MHE_HAVE_TSAN AND NOT MHE_SANITIZE)
  mhe_cuda_emu_library(mhecuda_emu_tsan thread)
endif()

# mhetrain with the emulated GPU, for end-to-end tests of runtime.device: cuda (tests/cuda).
add_executable(mhetrain_emu ${CMAKE_SOURCE_DIR}/trainer/cli/main.c)
target_link_libraries(mhetrain_emu PRIVATE mhecore mhecuda_emu)
