// The models `hearth serve` offers when it serves several: each -m (a directory or ORG/NAME of
// the Hugging Face cache), each checkpoint directory inside --models-dir, and with --hf-cache every
// model of the Hugging Face cache (its "main" revision, else its newest). Each is named by its
// directory's name, or ORG/NAME for a cache snapshot, as /v1/models lists it.
#pragma once
#include <string>
#include <vector>

#include "server/model_pool.h"

namespace hearth::cli {

// Throws hearth::Error naming what is wrong: a -m that is not a checkpoint, a --models-dir that is
// not a directory, two models with one name, or no model at all.
std::vector<server::ModelEntry> list_served_models(const std::vector<std::string>& models,
                                                   const std::string& models_dir, bool hf_cache);

}  // namespace hearth::cli
