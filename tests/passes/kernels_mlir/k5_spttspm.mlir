// K5 SpTTSpM: A[i,j,l] = sum_k B[i,j,k] * C[k,l]; B CSF (i dense, j compressed, k compressed),
// C CSC (l dense, k compressed); loop order i, j, l, k.
#CSF = #sparse_tensor.encoding<{ map = (d0, d1, d2) -> (d0 : dense, d1 : compressed, d2 : compressed), posWidth = 32, crdWidth = 32 }>
#CSC = #sparse_tensor.encoding<{ map = (d0, d1) -> (d1 : dense, d0 : compressed), posWidth = 32, crdWidth = 32 }>
#trait = { indexing_maps = [affine_map<(i,j,l,k) -> (i,j,k)>, affine_map<(i,j,l,k) -> (k,l)>, affine_map<(i,j,l,k) -> (i,j,l)>],
  iterator_types = ["parallel", "parallel", "parallel", "reduction"] }
func.func @k5(%b: tensor<4x6x16xf64, #CSF>, %c: tensor<16x5xf64, #CSC>, %a: tensor<4x6x5xf64> {bufferization.writable = true}) -> tensor<4x6x5xf64> {
  %r = linalg.generic #trait ins(%b, %c : tensor<4x6x16xf64, #CSF>, tensor<16x5xf64, #CSC>) outs(%a : tensor<4x6x5xf64>) {
  ^bb0(%x: f64, %y: f64, %z: f64):
    %m = arith.mulf %x, %y : f64
    %s = arith.addf %z, %m : f64
    linalg.yield %s : f64
  } -> tensor<4x6x5xf64>
  return %r : tensor<4x6x5xf64>
}
