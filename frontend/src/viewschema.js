// Generated from thunderviz/viz/view_format.schema.json by
// thunderviz.viz.schema.js_twin(). Do not edit: change the schema, then run
//   python -c 'import thunderviz.viz.schema as s; print(s.js_twin(), end="")' \
//     > frontend/src/viewschema.js
// (tests/safety/test_schema.py checks the two match).
export const MAX_DEPTH = 64;
export const VIEW_SCHEMA = {
 "type": "object",
 "required": [
  "format",
  "version",
  "traces"
 ],
 "properties": {
  "format": {
   "const": "thunderviz"
  },
  "version": {
   "$ref": "#/$defs/int",
   "minimum": 1
  },
  "title": {
   "type": "string"
  },
  "created_by": {
   "type": "string"
  },
  "traces": {
   "type": "object",
   "minProperties": 1,
   "propertyNames": {
    "$ref": "#/$defs/key"
   },
   "additionalProperties": {
    "$ref": "#/$defs/trace"
   }
  },
  "saved": {
   "type": [
    "array",
    "null"
   ],
   "items": {
    "$ref": "#/$defs/saved"
   }
  },
  "steps": {
   "type": [
    "array",
    "null"
   ],
   "items": {
    "$ref": "#/$defs/step"
   }
  },
  "grad_flow": {
   "type": [
    "object",
    "null"
   ],
   "propertyNames": {
    "$ref": "#/$defs/key"
   },
   "additionalProperties": {
    "$ref": "#/$defs/grad_flow"
   }
  },
  "transforms": {
   "type": [
    "array",
    "null"
   ],
   "items": {
    "$ref": "#/$defs/transform"
   }
  },
  "interventions": {
   "type": [
    "array",
    "null"
   ],
   "items": {
    "$ref": "#/$defs/intervention"
   }
  },
  "nan_ledger": {
   "type": [
    "array",
    "null"
   ],
   "items": {
    "$ref": "#/$defs/ledger_entry"
   }
  },
  "comparison": {
   "$ref": "#/$defs/comparison"
  }
 },
 "$defs": {
  "int": {
   "type": "integer",
   "minimum": -9007199254740991,
   "maximum": 9007199254740991
  },
  "count": {
   "type": "integer",
   "minimum": 0,
   "maximum": 9007199254740991
  },
  "int_or_null": {
   "anyOf": [
    {
     "$ref": "#/$defs/int"
    },
    {
     "type": "null"
    }
   ]
  },
  "number": {
   "anyOf": [
    {
     "type": "number"
    },
    {
     "enum": [
      "nan",
      "inf",
      "-inf"
     ]
    }
   ]
  },
  "number_or_null": {
   "anyOf": [
    {
     "$ref": "#/$defs/number"
    },
    {
     "type": "null"
    }
   ]
  },
  "names": {
   "type": "array",
   "items": {
    "type": "string"
   }
  },
  "op_ref": {
   "type": [
    "string",
    "null"
   ]
  },
  "key": {
   "not": {
    "const": "__proto__"
   },
   "$comment": "a name used as a key: a JavaScript reader looking \"__proto__\" up in an object finds Object.prototype"
  },
  "module_path": {
   "type": "string",
   "pattern": "^[^.]*(\\.[^.]*){0,127}$",
   "$comment": "at most 128 dot-separated parts: readers walk the module tree one level at a time"
  },
  "shape": {
   "type": [
    "array",
    "null"
   ],
   "items": {
    "$ref": "#/$defs/count"
   }
  },
  "trace": {
   "type": "object",
   "required": [
    "ops"
   ],
   "properties": {
    "kind": {
     "type": "string"
    },
    "name": {
     "type": "string"
    },
    "provenance": {
     "type": "string"
    },
    "python": {
     "type": "string"
    },
    "inputs": {
     "$ref": "#/$defs/names"
    },
    "outputs": {
     "$ref": "#/$defs/names"
    },
    "ops": {
     "type": "array",
     "items": {
      "$ref": "#/$defs/op"
     }
    },
    "tensors": {
     "type": "object",
     "propertyNames": {
      "$ref": "#/$defs/key"
     },
     "additionalProperties": {
      "$ref": "#/$defs/tensor"
     }
    }
   }
  },
  "op": {
   "type": "object",
   "required": [
    "id"
   ],
   "properties": {
    "id": {
     "type": "string",
     "minLength": 1
    },
    "parent": {
     "$ref": "#/$defs/op_ref"
    },
    "level": {
     "$ref": "#/$defs/count"
    },
    "name": {
     "type": "string"
    },
    "label": {
     "type": "string"
    },
    "sym_id": {
     "type": "string"
    },
    "is_prim": {
     "type": "boolean"
    },
    "module_path": {
     "$ref": "#/$defs/module_path"
    },
    "inputs": {
     "$ref": "#/$defs/names"
    },
    "outputs": {
     "$ref": "#/$defs/names"
    },
    "args_repr": {
     "type": "string"
    },
    "line": {
     "$ref": "#/$defs/int_or_null"
    },
    "line_end": {
     "$ref": "#/$defs/int_or_null"
    },
    "source": {
     "anyOf": [
      {
       "$ref": "#/$defs/source"
      },
      {
       "type": "null"
      }
     ]
    },
    "tags": {
     "$ref": "#/$defs/names"
    },
    "fwd_op": {
     "$ref": "#/$defs/op_ref"
    }
   }
  },
  "source": {
   "type": "object",
   "properties": {
    "file": {
     "type": "string"
    },
    "line": {
     "$ref": "#/$defs/int"
    },
    "code": {
     "type": "string"
    },
    "function": {
     "type": "string"
    },
    "context": {
     "type": "array",
     "items": {
      "type": "array",
      "minItems": 2,
      "maxItems": 2,
      "items": {
       "anyOf": [
        {
         "$ref": "#/$defs/int"
        },
        {
         "type": "string"
        }
       ]
      }
     }
    }
   }
  },
  "tensor": {
   "type": "object",
   "properties": {
    "shape": {
     "$ref": "#/$defs/shape"
    },
    "dtype": {
     "type": [
      "string",
      "null"
     ]
    },
    "device": {
     "type": [
      "string",
      "null"
     ]
    },
    "requires_grad": {
     "type": "boolean"
    },
    "kind": {
     "type": "string"
    },
    "producer": {
     "$ref": "#/$defs/op_ref"
    },
    "consumers": {
     "$ref": "#/$defs/names"
    },
    "stats": {
     "anyOf": [
      {
       "$ref": "#/$defs/stats"
      },
      {
       "type": "null"
      }
     ]
    },
    "object": {
     "type": "string"
    }
   }
  },
  "stats": {
   "type": "object",
   "properties": {
    "min": {
     "$ref": "#/$defs/number_or_null"
    },
    "max": {
     "$ref": "#/$defs/number_or_null"
    },
    "mean": {
     "$ref": "#/$defs/number_or_null"
    },
    "std": {
     "$ref": "#/$defs/number_or_null"
    },
    "norm": {
     "$ref": "#/$defs/number_or_null"
    },
    "numel": {
     "$ref": "#/$defs/count"
    },
    "nan": {
     "$ref": "#/$defs/count"
    },
    "inf": {
     "$ref": "#/$defs/count"
    },
    "hist": {
     "anyOf": [
      {
       "type": "null"
      },
      {
       "type": "object",
       "properties": {
        "edges": {
         "type": "array",
         "maxItems": 1025,
         "items": {
          "$ref": "#/$defs/number"
         }
        },
        "counts": {
         "type": "array",
         "maxItems": 1024,
         "items": {
          "$ref": "#/$defs/count"
         }
        }
       }
      }
     ]
    }
   }
  },
  "stats_by_name": {
   "type": "object",
   "propertyNames": {
    "$ref": "#/$defs/key"
   },
   "additionalProperties": {
    "anyOf": [
     {
      "$ref": "#/$defs/stats"
     },
     {
      "type": "null"
     }
    ]
   }
  },
  "saved": {
   "type": "object",
   "properties": {
    "name": {
     "type": "string"
    },
    "shape": {
     "$ref": "#/$defs/shape"
    },
    "dtype": {
     "type": [
      "string",
      "null"
     ]
    },
    "bytes": {
     "$ref": "#/$defs/count"
    },
    "producer": {
     "$ref": "#/$defs/op_ref"
    },
    "fwd_op": {
     "$ref": "#/$defs/op_ref"
    },
    "consumers": {
     "$ref": "#/$defs/names"
    },
    "module_path": {
     "$ref": "#/$defs/module_path"
    },
    "recomputed": {
     "type": "boolean"
    }
   }
  },
  "step": {
   "type": "object",
   "properties": {
    "index": {
     "$ref": "#/$defs/count"
    },
    "op": {
     "$ref": "#/$defs/op_ref"
    },
    "outputs": {
     "$ref": "#/$defs/stats_by_name"
    },
    "grads": {
     "$ref": "#/$defs/stats_by_name"
    },
    "note": {
     "type": [
      "string",
      "null"
     ]
    }
   }
  },
  "grad_flow": {
   "type": "object",
   "properties": {
    "norm": {
     "$ref": "#/$defs/number_or_null"
    },
    "status": {
     "type": "string"
    }
   }
  },
  "intervention": {
   "type": "object",
   "properties": {
    "target": {
     "type": "string"
    },
    "kind": {
     "type": "string"
    },
    "edit": {
     "type": "object",
     "properties": {
      "kind": {
       "type": "string"
      },
      "params": {
       "type": "array",
       "items": {
        "$ref": "#/$defs/number"
       }
      },
      "seed": {
       "$ref": "#/$defs/int"
      },
      "name": {
       "type": "string"
      }
     }
    },
    "names": {
     "$ref": "#/$defs/names"
    },
    "op": {
     "$ref": "#/$defs/op_ref"
    },
    "first_step": {
     "$ref": "#/$defs/count"
    }
   }
  },
  "ledger_entry": {
   "type": "object",
   "properties": {
    "op": {
     "$ref": "#/$defs/op_ref"
    },
    "status": {
     "type": "string"
    },
    "bad_inputs": {
     "$ref": "#/$defs/names"
    },
    "bad_outputs": {
     "$ref": "#/$defs/names"
    }
   }
  },
  "comparison": {
   "type": "object",
   "required": [
    "kind",
    "documents",
    "matches"
   ],
   "$comment": "This document is side 0 of a side-by-side view; documents are the other sides, each itself a view document (checked as one, after the schema) without a comparison of its own.",
   "properties": {
    "kind": {
     "enum": [
      "runs",
      "ranks"
     ]
    },
    "labels": {
     "$ref": "#/$defs/names"
    },
    "documents": {
     "type": "array",
     "minItems": 1,
     "items": {
      "type": "object"
     }
    },
    "rtol": {
     "$ref": "#/$defs/number"
    },
    "measure": {
     "type": "string"
    },
    "matches": {
     "type": "array",
     "items": {
      "$ref": "#/$defs/match"
     }
    },
    "divergences": {
     "type": "array",
     "items": {
      "$ref": "#/$defs/divergence"
     }
    }
   }
  },
  "match": {
   "type": "object",
   "required": [
    "ops"
   ],
   "properties": {
    "ops": {
     "type": "array",
     "items": {
      "$ref": "#/$defs/op_ref"
     }
    },
    "forward": {
     "$ref": "#/$defs/number_or_null"
    },
    "grad": {
     "$ref": "#/$defs/number_or_null"
    },
    "norms": {
     "type": "array",
     "items": {
      "$ref": "#/$defs/number_or_null"
     }
    },
    "collective": {
     "type": "boolean"
    },
    "note": {
     "type": "string"
    }
   }
  },
  "divergence": {
   "type": "object",
   "properties": {
    "what": {
     "type": "string"
    },
    "ops": {
     "type": "array",
     "items": {
      "$ref": "#/$defs/op_ref"
     }
    },
    "op": {
     "type": "string"
    },
    "module": {
     "$ref": "#/$defs/module_path"
    },
    "source": {
     "anyOf": [
      {
       "$ref": "#/$defs/source"
      },
      {
       "type": "null"
      }
     ]
    },
    "value": {
     "$ref": "#/$defs/number_or_null"
    },
    "ranks": {
     "type": "array",
     "items": {
      "$ref": "#/$defs/count"
     }
    },
    "detail": {
     "type": "string"
    }
   }
  },
  "transform": {
   "type": "object",
   "properties": {
    "name": {
     "type": "string"
    },
    "before": {
     "type": "string"
    },
    "after": {
     "type": "string"
    },
    "trace_before": {
     "anyOf": [
      {
       "$ref": "#/$defs/trace"
      },
      {
       "type": "null"
      }
     ]
    },
    "steps": {
     "type": "array",
     "items": {
      "type": "object",
      "properties": {
       "index": {
        "$ref": "#/$defs/count"
       },
       "visited": {
        "$ref": "#/$defs/op_ref"
       },
       "visit_type": {
        "type": "string"
       },
       "inserted": {
        "$ref": "#/$defs/names"
       },
       "removed": {
        "$ref": "#/$defs/names"
       },
       "text": {
        "type": "string"
       }
      }
     }
    }
   }
  }
 }
};
