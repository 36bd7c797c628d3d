# Data pipeline: shards, manifests, importers, tokenizer, loader (src/data, src/cli/data.c).
#
# Tokenizer references come from the PyPI libraries (tiktoken, tokenizers) in the project's
# virtual environment (dt_ref_venv, tests/CMakeLists.txt). Fashion-MNIST references need only
# numpy (Debian python3) and the IDX files of Debian's dataset-fashion-mnist.
set(DT_FMNIST_DIR "/usr/share/datasets/fashion-mnist" CACHE PATH
    "IDX files of Fashion-MNIST (Debian dataset-fashion-mnist)")
set(DT_TOKENIZERS "${PROJECT_SOURCE_DIR}/data/tokenizers")

dt_ref_venv(NAME ref_tok SCRIPT tests/ref/ref_tok.py)
dt_ref_venv(NAME ref_tok_hf SCRIPT tests/ref/ref_tok_hf.py)
dt_ref_venv(NAME ref_tok_sp SCRIPT tests/ref/ref_tok_sp.py TIMEOUT 120)
set_tests_properties(ref_tok ref_tok_hf ref_tok_sp PROPERTIES LABELS "parity;data")
dt_test(NAME test_tok_cl100k SOURCES data/test_tok_parity.c LABELS parity data
        ARGS ${DT_TOKENIZERS}/cl100k_base.tiktoken tok_cl100k.bin
        FIXTURES_REQUIRED ref_tok TIMEOUT 120)
dt_test(NAME test_tok_hf SOURCES data/test_tok_parity.c LABELS parity data
        ARGS ${DT_REF_DIR}/hf_bytelevel.json tok_hf_bytelevel.bin
             ${DT_REF_DIR}/hf_split.json tok_hf_split.bin
        FIXTURES_REQUIRED ref_tok_hf TIMEOUT 120)
# SentencePiece-style BPE (Llama 2 / Mistral, Metaspace first and always+split, Gemma) with byte
# fallback (and without: the unknown token), trained by ref_tok_sp.py
dt_test(NAME test_tok_sp SOURCES data/test_tok_parity.c LABELS parity data
        ARGS ${DT_REF_DIR}/sp_llama2.json tok_sp_llama2.bin
             ${DT_REF_DIR}/sp_metaspace.json tok_sp_metaspace.bin
             ${DT_REF_DIR}/sp_metasplit.json tok_sp_metasplit.bin
             ${DT_REF_DIR}/sp_gemma.json tok_sp_gemma.bin
             ${DT_REF_DIR}/sp_unk.json tok_sp_unk.bin
        FIXTURES_REQUIRED ref_tok_sp TIMEOUT 120)

dt_ref(NAME ref_data_fmnist SCRIPT tests/ref/ref_data_fmnist.py)
set_tests_properties(ref_data_fmnist PROPERTIES LABELS "parity;data")
dt_test(NAME test_data_fmnist SOURCES data/test_data_fmnist.c LABELS data parity
        ARGS ${DT_FMNIST_DIR} FIXTURES_REQUIRED ref_data_fmnist TIMEOUT 120)

dt_test(NAME test_data_shard SOURCES data/test_data_shard.c LABELS unit data TIMEOUT 60)
dt_test(NAME test_data_import SOURCES data/test_data_import.c LABELS unit data
        ARGS ${DT_TOKENIZERS}/cl100k_base.tiktoken TIMEOUT 180)
dt_test(NAME test_data_loader SOURCES data/test_data_loader.c LABELS unit data TIMEOUT 60)
dt_test(NAME test_data_resume SOURCES data/test_data_resume.c LABELS unit data TIMEOUT 60)
dt_test(NAME test_data_blockshuffle SOURCES data/test_data_blockshuffle.c LABELS unit data
        TIMEOUT 60)
dt_test(NAME test_tok_unit SOURCES data/test_tok_unit.c LABELS unit data
        ARGS ${DT_TOKENIZERS}/cl100k_base.tiktoken TIMEOUT 180)
# The CLI code is compiled in directly (src/cli/data.c), so the test does not depend on how
# src/cli/main.c dispatches.
dt_test(NAME test_data_cli SOURCES data/test_data_cli.c ${PROJECT_SOURCE_DIR}/src/cli/data.c
        ${PROJECT_SOURCE_DIR}/src/cli/json_out.c
        LABELS unit data ARGS ${DT_TOKENIZERS}/cl100k_base.tiktoken TIMEOUT 60)

# Image transforms (RandomResizedCrop boxes, PIL bilinear resize, ToTensor+Normalize,
# ColorJitter) against torchvision + Pillow from the virtual environment.
dt_ref_venv(NAME ref_imgaug SCRIPT tests/ref/ref_imgaug.py TIMEOUT 180)
set_tests_properties(ref_imgaug PROPERTIES LABELS "parity;data")
dt_test(NAME test_image_transform SOURCES data/test_image_transform.c LABELS parity data
        FIXTURES_REQUIRED ref_imgaug TIMEOUT 120)
# The same program's checks that need no reference (unit: also under the sanitizers).
add_test(NAME test_image_transform_unit COMMAND test_image_transform unit)
set_tests_properties(test_image_transform_unit PROPERTIES LABELS "unit;data" TIMEOUT 60
                     ENVIRONMENT "GOMP_SPINCOUNT=1000;DT_GRAPH_POISON=1")
# Image codec parity with Pillow (the venv's; skipped without it): the test runs
# tests/ref/ref_image_codec.py itself, then decodes every file it wrote (test_image_codec.c).
dt_test(NAME test_image_codec SOURCES data/test_image_codec.c LABELS parity data
        ARGS ${DT_VENV_PYTHON} ${PROJECT_SOURCE_DIR}/tests/ref/ref_image_codec.py
             ${CMAKE_CURRENT_BINARY_DIR} TIMEOUT 120)
set_tests_properties(test_image_codec PROPERTIES SKIP_RETURN_CODE 77)
dt_test(NAME test_data_encoded SOURCES data/test_data_encoded.c LABELS unit data TIMEOUT 60)
# A crop's part of a JPEG decoded alone (image_jpeg_box.c) against the whole decode; the test
# writes its JPEGs with TurboJPEG.
dt_test(NAME test_image_box SOURCES data/test_image_box.c LABELS unit data TIMEOUT 120)
target_link_libraries(test_image_box PRIVATE PkgConfig::IMGCODEC)
# `dtrain data import images` against torchvision's ImageFolder (the venv's; skipped without it).
add_test(NAME data_import_images COMMAND ${PROJECT_SOURCE_DIR}/tests/data/import_images.sh
         $<TARGET_FILE:dtrain> ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR})
set_tests_properties(data_import_images PROPERTIES LABELS "e2e;data;parity" TIMEOUT 120
                     SKIP_RETURN_CODE 77 ENVIRONMENT "DT_VENV_PYTHON=${DT_VENV_PYTHON}")
# JSONL chat import against transformers' apply_chat_template (model folders of five template
# families, generated with `tokenizers`) and the refusals of other templates.
dt_ref_venv(NAME ref_chat_templates SCRIPT tests/ref/ref_chat_templates.py TIMEOUT 120)
set_tests_properties(ref_chat_templates PROPERTIES LABELS "parity;data")
dt_test(NAME test_chat_parity SOURCES data/test_chat_parity.c LABELS parity data
        ARGS ${DT_REF_DIR} FIXTURES_REQUIRED ref_chat_templates TIMEOUT 60)
# The loader on encoded images: threads, resume, DCT-scaled decode, eval, corrupt records.
dt_test(NAME test_loader_images SOURCES data/test_loader_images.c LABELS unit data TIMEOUT 60)
# Encoded photos end to end: the loader's batches against torchvision on the same boxes (with
# and without DCT scaling), import -> train -> resume bit-exact (the venv's; skipped without it).
add_test(NAME data_loader_images COMMAND ${PROJECT_SOURCE_DIR}/tests/data/loader_images.sh
         $<TARGET_FILE:dtrain> $<TARGET_FILE:test_loader_images> ${PROJECT_SOURCE_DIR}
         ${CMAKE_CURRENT_BINARY_DIR})
set_tests_properties(data_loader_images PROPERTIES LABELS "e2e;data;parity" TIMEOUT 180
                     SKIP_RETURN_CODE 77 ENVIRONMENT "DT_VENV_PYTHON=${DT_VENV_PYTHON}")

# Streaming a dataset from S3 (src/data/remote.c) against a real SeaweedFS that
# tests/storage/seaweed.sh starts for each test (SKIP 77 when its weed binary is missing): the
# same bits as from the local copy (also with block-aware shuffling, and with data.pack=docs),
# the same exported tokenizer.json, the S3 gateway stopped and restarted mid-run (the run waits
# and goes on to the same bits), a corrupt object named in one line. RUN_SERIAL for the outage:
# the stop must land while the run reads.
foreach(case same block docs outage corrupt)
  add_test(NAME data_s3_${case}
           COMMAND bash ${PROJECT_SOURCE_DIR}/tests/storage/seaweed.sh run --
                   ${PROJECT_SOURCE_DIR}/tests/data/s3_stream.sh $<TARGET_FILE:dtrain>
                   ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA} $<TARGET_FILE:s3_get> ${case})
  set_tests_properties(data_s3_${case} PROPERTIES LABELS "data;storage;e2e" TIMEOUT 120
                       SKIP_RETURN_CODE 77 FIXTURES_REQUIRED fortunes_data
                       ENVIRONMENT "OMP_NUM_THREADS=1;GOMP_SPINCOUNT=1000")
endforeach()
set_tests_properties(data_s3_outage PROPERTIES RUN_SERIAL TRUE)
if(MPI_FOUND)
  # 2 ranks, each reading its own share from s3://: the same losses and weights as 2 ranks on
  # the local copy.
  add_test(NAME data_s3_np2
           COMMAND bash ${PROJECT_SOURCE_DIR}/tests/storage/seaweed.sh run --
                   ${PROJECT_SOURCE_DIR}/tests/data/s3_stream.sh $<TARGET_FILE:dtrain>
                   ${PROJECT_SOURCE_DIR} ${DT_TRAIN_DATA} $<TARGET_FILE:s3_get> np2
                   ${MPIEXEC_EXECUTABLE} --allow-run-as-root --oversubscribe --bind-to none)
  set_tests_properties(data_s3_np2 PROPERTIES LABELS "data;storage;e2e;dist" TIMEOUT 120
                       SKIP_RETURN_CODE 77 RUN_SERIAL TRUE FIXTURES_REQUIRED fortunes_data
                       ENVIRONMENT "OMP_NUM_THREADS=1;GOMP_SPINCOUNT=1000")
endif()
