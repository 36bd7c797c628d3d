# Config (YAML schema, overrides, errors) and the memory plan (`dtrain plan`).
dt_test(NAME config_unit SOURCES config/test_config.c LABELS unit)
dt_test(NAME config_plan SOURCES config/test_plan.c LABELS unit ARGS ${PROJECT_SOURCE_DIR})
dt_test(NAME config_plan_cli SOURCES config/test_plan_cli.c ${PROJECT_SOURCE_DIR}/src/cli/plan.c
        LABELS unit ARGS ${PROJECT_SOURCE_DIR})
dt_test(NAME config_plan_compare SOURCES config/test_plan_compare.c ${PROJECT_SOURCE_DIR}/src/cli/plan.c
        LABELS unit ARGS ${PROJECT_SOURCE_DIR})
# Memory admission of a rebuilt graph (dist.batch_shares=auto): the growth must fit, not the whole
dt_test(NAME config_plan_admit SOURCES config/test_plan_admit.c LABELS unit)
set_tests_properties(config_plan_admit PROPERTIES SKIP_RETURN_CODE 77)
# dist.batch_shares: parsing, auto, and the split of measured rates into parts
dt_test(NAME config_shares SOURCES config/test_shares.c LABELS unit)
# examples/resnet152-imagenet.yaml validates and plans (its data paths are placeholders: the
# plan reads the image size from the config).
add_test(NAME config_plan_resnet152_imagenet COMMAND dtrain plan
         ${PROJECT_SOURCE_DIR}/examples/resnet152-imagenet.yaml)
set_tests_properties(config_plan_resnet152_imagenet PROPERTIES LABELS unit TIMEOUT 60
                     PASS_REGULAR_EXPRESSION "resnet-152: stock stem.*batch 64 x 224x224 images")
# `dtrain plan --device / --gpu-gib` (the GPU memory plan, a model: no GPU needed) and the JSON's
# host figure, read with Python's json (tests/config/plan_gpu.py).
add_test(NAME config_plan_gpu COMMAND python3 ${PROJECT_SOURCE_DIR}/tests/config/plan_gpu.py
         $<TARGET_FILE:dtrain> ${PROJECT_SOURCE_DIR})
set_tests_properties(config_plan_gpu PROPERTIES LABELS unit TIMEOUT 300)
